package config

import (
	"slices"

	"github.com/dohfwd/dohfwd/certs"
)

// CertsConfig returns the certificate manager's part of the configuration.
// TLS-ALPN-01 challenges are answered on the HTTPS listener.
func (c *Config) CertsConfig() certs.Config {
	return certs.Config{
		Mode:     c.TLS.Mode,
		CertFile: c.TLS.CertFile,
		KeyFile:  c.TLS.KeyFile,
		ACME: certs.ACMEConfig{
			Domains:       slices.Clone(c.TLS.ACME.Domains),
			Email:         c.TLS.ACME.Email,
			CA:            c.TLS.ACME.CA,
			CARoot:        c.TLS.ACME.CARoot,
			Storage:       c.TLS.ACME.Storage,
			HTTPListen:    c.TLS.ACME.HTTPListen,
			TLSALPNListen: c.Listen.HTTPS,
		},
	}
}
