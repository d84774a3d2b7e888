//go:build !wasip1

package assembly

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/rs/zerolog"

	"github.com/dohfwd/dohfwd/doh"
	"github.com/dohfwd/dohfwd/doh/config"
	"github.com/dohfwd/dohfwd/doh/odoh"
)

// newOblivious builds the ODoH roles the odoh section turns on: the
// target's keys (from odoh.key_file's seed, or a fresh one) and the
// relay. The log says which are on, never a key.
func newOblivious(cfg *config.Config, log zerolog.Logger) (doh.ObliviousTarget, doh.ObliviousRelay, error) {
	o := cfg.ODoH
	var (
		target doh.ObliviousTarget
		relay  doh.ObliviousRelay
	)
	if o.Target {
		var ring *odoh.Keyring
		var err error
		if o.KeyFile != "" {
			seed, lerr := odoh.LoadSeed(o.KeyFile)
			if lerr != nil {
				return nil, nil, fmt.Errorf("odoh.key_file: %w", lerr)
			}
			ring, err = odoh.NewKeyring(seed, o.Rotate, nil)
		} else {
			ring, err = odoh.NewRandomKeyring(o.Rotate, nil)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("odoh: %w", err)
		}
		target = ring
		log.Info().Bool("key_file", o.KeyFile != "").Dur("rotate", o.Rotate).Str("configs", odoh.ConfigsPath).
			Msg("odoh target on")
	}
	if o.Relay {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if o.CARoot != "" {
			pem, err := os.ReadFile(o.CARoot)
			if err != nil {
				return nil, nil, fmt.Errorf("odoh.ca_root: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, nil, errors.New("odoh.ca_root: no PEM certificate in " + o.CARoot)
			}
			tc.RootCAs = pool
		}
		relay = doh.NewRelay(doh.RelayOptions{Targets: o.Targets, TLS: tc})
		log.Info().Strs("targets", o.Targets).Str("path", doh.RelayPath).Msg("odoh relay on")
	}
	return target, relay, nil
}
