//go:build wasip1

package assembly

import (
	"github.com/rs/zerolog"

	"github.com/dohfwd/dohfwd/doh/config"
)

// newSetupPages is nil in the module: the setup page and the Apple profile
// are served by the native listeners, which know their ports.
func newSetupPages(*config.Config) (setupPages, error) { return nil, nil }

// newDnstap is nil in the module: the dnstap socket is the native
// server's.
func newDnstap(*config.Config, zerolog.Logger, string) (dnstapWriter, error) { return nil, nil }
