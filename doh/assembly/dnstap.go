//go:build !wasip1

package assembly

import (
	"fmt"
	"os"

	"github.com/rs/zerolog"

	"github.com/dohfwd/dohfwd/doh/config"
	"github.com/dohfwd/dohfwd/doh/internal/dnstap"
)

// newDnstap starts the dnstap writer cfg.Dnstap asks for; nil when
// dnstap.address is "".
func newDnstap(cfg *config.Config, log zerolog.Logger, version string) (dnstapWriter, error) {
	c := cfg.Dnstap
	if c.Address == "" {
		return nil, nil
	}
	network, address, err := config.DnstapAddress(c.Address)
	if err != nil {
		return nil, fmt.Errorf("dnstap.address: %w", err)
	}
	identity := c.Identity
	if identity == "" {
		identity, _ = os.Hostname()
	}
	return dnstap.New(dnstap.Config{Network: network, Address: address, Queue: c.Queue,
		Identity: identity, Version: "dohfwd " + version, Log: log}), nil
}
