//go:build wasip1

package assembly

import "github.com/dohfwd/dohfwd/doh/config"

// newSetupPages is nil in the module: the setup page and the Apple profile
// are served by the native listeners, which know their ports.
func newSetupPages(*config.Config) (setupPages, error) { return nil, nil }
