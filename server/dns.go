package server

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"

	"github.com/dohfwd/dohfwd/dnsserver"
)

// listenDNS opens the DNS-over-TLS listener (listen.dot) with the HTTPS
// listener's certificates. Its server answers from o.Resolver.
func listenDNS(o Options, certificates *tls.Config) ([]*listener, error) {
	cfg := o.Config
	if cfg.Listen.DoT == "" {
		return nil, nil
	}
	if o.Resolver == nil {
		return nil, errors.New("listen.dot: no resolver for the DNS listeners")
	}
	ln, err := net.Listen("tcp", cfg.Listen.DoT)
	if err != nil {
		return nil, fmt.Errorf("listen.dot %s: %w", cfg.Listen.DoT, err)
	}
	srv := &dnsserver.Server{Resolver: o.Resolver, TLSConfig: certificates}
	return []*listener{{name: "dot", ln: ln, dns: srv}}, nil
}
