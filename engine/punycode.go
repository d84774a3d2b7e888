//go:build !wasip1

package engine

import "golang.org/x/net/idna"

// punycode is an internationalized name in ASCII, by IDNA's lookup rules.
func punycode(name string) (string, error) { return idna.Lookup.ToASCII(name) }
