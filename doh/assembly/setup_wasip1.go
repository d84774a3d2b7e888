//go:build wasip1

package assembly

import (
	"errors"

	"github.com/rs/zerolog"

	"github.com/dohfwd/dohfwd/doh"
	"github.com/dohfwd/dohfwd/doh/config"
)

// newSetupPages is nil in the module: the setup page and the Apple profile
// are served by the native listeners, which know their ports.
func newSetupPages(*config.Config) (setupPages, error) { return nil, nil }

// newDnstap is nil in the module: the dnstap socket is the native
// server's.
func newDnstap(*config.Config, zerolog.Logger, string) (dnstapWriter, error) { return nil, nil }

// newOblivious refuses the ODoH roles in the module: they are served
// natively (README, "Oblivious DoH": the module's size budget, and keys
// that every instance of a pool would have to share).
func newOblivious(cfg *config.Config, _ zerolog.Logger) (doh.ObliviousTarget, doh.ObliviousRelay, error) {
	if cfg.ODoH.Target || cfg.ODoH.Relay {
		return nil, nil, errors.New("odoh: the WebAssembly module serves no ODoH target or relay: run dohfwd natively for them")
	}
	return nil, nil, nil
}
