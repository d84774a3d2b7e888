//go:build wasip1

package engine

import "errors"

// punycode refuses in the edge module, which links no IDNA (its Unicode
// tables are 90 KB of the gzipped module): the host hands it names in
// punycode already (ASCIIName; config.Encode and EngineConfig convert).
func punycode(string) (string, error) {
	return "", errors.New("an internationalized name: the edge module takes names in punycode, converted by its host")
}
