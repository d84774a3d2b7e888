package server

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/dohfwd/dohfwd/doh/config"
	"github.com/dohfwd/dohfwd/doh/internal/ddr"
	"github.com/dohfwd/dohfwd/doh/internal/dnsserver"
)

// listenDNS opens the DNS-over-TLS listener (listen.dot) and the
// DNS-over-QUIC one (listen.doq) with the HTTPS listener's certificates,
// and the plain DNS listeners (listen.dns, UDP and TCP on one port). Their
// servers answer from o.Resolver.
func listenDNS(o Options, certificates *tls.Config) ([]*listener, error) {
	cfg := o.Config
	if cfg.Listen.DoT == "" && cfg.Listen.DoQ == "" && cfg.Listen.DNS == "" {
		return nil, nil
	}
	if o.Resolver == nil {
		return nil, errors.New("listen: no resolver for the DNS listeners")
	}
	var out []*listener
	if cfg.Listen.DoT != "" {
		ln, err := listenDoH(o, "listen.dot", cfg.Listen.DoT)
		if err != nil {
			return nil, err
		}
		srv := &dnsserver.Server{Resolver: o.Resolver, TLSConfig: certificates, OnDrop: logDrop(o, "dot"), Admit: o.Admit, Proto: "dot", Wiretap: o.Wiretap}
		out = append(out, &listener{name: "dot", ln: ln, dns: srv})
	}
	if cfg.Listen.DoQ != "" {
		l, err := listenDoQ(o, certificates)
		if err != nil {
			for _, l := range out {
				l.ln.Close()
			}
			return nil, err
		}
		out = append(out, l)
	}
	if cfg.Listen.DNS != "" {
		ln, pc, err := listenUDPAndTCP(cfg.Listen.DNS)
		if err != nil {
			for _, l := range out {
				if l.quic != nil {
					l.quic.Close()
				} else {
					l.ln.Close()
				}
			}
			return nil, fmt.Errorf("listen.dns %s: %w", cfg.Listen.DNS, err)
		}
		srv := &dnsserver.Server{Resolver: o.Resolver, OnDrop: logDrop(o, "dns-tcp"), Admit: o.Admit, Proto: "dns", Wiretap: o.Wiretap}
		out = append(out, &listener{name: "dns-udp", pc: pc, dns: srv}, &listener{name: "dns-tcp", ln: o.wrapClients(ln), dns: srv})
	}
	return out, nil
}

// logDrop logs, at debug, each DNS connection closed for bad input.
func logDrop(o Options, listener string) func(net.Addr, string) {
	log := o.Log
	return func(peer net.Addr, reason string) {
		log.Debug().Str("listener", listener).Str("client", peer.String()).Str("problem", reason).Msg("connection dropped")
	}
}

// listenUDPAndTCP opens TCP and UDP on the same address. With port 0 the
// system picks TCP's port; UDP takes the same one, tried a few times
// should it be taken.
func listenUDPAndTCP(addr string) (net.Listener, net.PacketConn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, nil, err
	}
	for try := 0; ; try++ {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, nil, err
		}
		bound := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
		pc, err := net.ListenPacket("udp", net.JoinHostPort(host, bound))
		if err == nil {
			return ln, pc, nil
		}
		ln.Close()
		if port != "0" || try == 10 {
			return nil, nil, err
		}
	}
}

// designate gives o.Designate what DDR advertises, once the encrypted
// listeners are bound.
func designate(o Options, listeners []*listener, certificates *tls.Config) {
	if o.Designate == nil {
		return
	}
	bound := map[string]netip.AddrPort{}
	for _, l := range listeners {
		if ap, err := netip.ParseAddrPort(l.addr().String()); err == nil {
			bound[l.name] = ap
		}
	}
	var names []string
	if o.Config.TLS.Mode != "acme" {
		names = certificateNames(certificates)
	}
	d := Designation(o.Config, bound, names)
	o.Designate(d)
	if len(d.Endpoints) > 0 {
		o.Log.Info().Strs("names", d.Names).Int("endpoints", len(d.Endpoints)).
			Int("addresses", len(d.Addresses)).Msg("ddr")
	}
}

// Designation is what _dns.resolver.arpa advertises (RFC 9462): for each
// name the HTTPS listener (DoH), the DoT and the DoQ listener at their
// bound ports.
// Names are ddr.names, else tls.acme.domains, else certNames (the served
// certificate's DNS names); addresses are ddr.addresses, else the
// encrypted listeners' own addresses when they are not wildcards. No
// encrypted listener, no designation.
func Designation(cfg *config.Config, bound map[string]netip.AddrPort, certNames []string) ddr.Designation {
	var d ddr.Designation
	if ap, ok := bound["https"]; ok {
		h3, ok := bound["http3"]
		d.Endpoints = append(d.Endpoints, ddr.Endpoint{Protocol: ddr.DoH, Port: ap.Port(), Path: cfg.Listen.Path,
			HTTP3: ok && h3.Port() == ap.Port()})
	}
	if ap, ok := bound["dot"]; ok {
		d.Endpoints = append(d.Endpoints, ddr.Endpoint{Protocol: ddr.DoT, Port: ap.Port()})
	}
	if ap, ok := bound["doq"]; ok {
		d.Endpoints = append(d.Endpoints, ddr.Endpoint{Protocol: ddr.DoQ, Port: ap.Port()})
	}
	if len(d.Endpoints) == 0 {
		return ddr.Designation{}
	}
	switch {
	case len(cfg.DDR.Names) > 0:
		d.Names = cfg.DDR.Names
	case len(cfg.TLS.ACME.Domains) > 0 && cfg.TLS.Mode == "acme":
		d.Names = cfg.TLS.ACME.Domains
	default:
		d.Names = certNames
	}
	if len(cfg.DDR.Addresses) > 0 {
		for _, s := range cfg.DDR.Addresses {
			if a, err := netip.ParseAddr(s); err == nil {
				d.Addresses = append(d.Addresses, a.Unmap())
			}
		}
		return d
	}
	for _, name := range []string{"https", "dot", "doq"} {
		if ap, ok := bound[name]; ok {
			a := ap.Addr().Unmap()
			if !a.IsUnspecified() && !containsAddr(d.Addresses, a) {
				d.Addresses = append(d.Addresses, a)
			}
		}
	}
	return d
}

func containsAddr(list []netip.Addr, a netip.Addr) bool {
	for _, b := range list {
		if a == b {
			return true
		}
	}
	return false
}

// certificateNames are the DNS names (wildcards left out) of the
// certificate served to a client that sends no server name.
func certificateNames(c *tls.Config) []string {
	if c == nil || c.GetCertificate == nil {
		return nil
	}
	cert, err := c.GetCertificate(&tls.ClientHelloInfo{})
	if err != nil || cert == nil || len(cert.Certificate) == 0 {
		return nil
	}
	leaf := cert.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil
		}
	}
	var names []string
	for _, n := range leaf.DNSNames {
		if !strings.Contains(n, "*") {
			names = append(names, n)
		}
	}
	return names
}
