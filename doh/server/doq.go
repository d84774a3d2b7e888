package server

import (
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/dohfwd/dohfwd/doh/internal/dnsserver"
	"github.com/dohfwd/dohfwd/doh/internal/quicconf"
)

// listenDoQ opens the DNS-over-QUIC listener (listen.doq, RFC 9250) on
// UDP with the TLS listeners' certificates (their GetCertificate, so a
// renewal or reload reaches new handshakes and open connections stay). Its
// limits are DoT's: as many open questions (streams) per connection, the
// same idle timeout; each connection counts against the connection limits
// like a TCP one (o.HoldConn). New connections must validate their address
// with a Retry when they come faster than limits.connections per second,
// or when too many handshakes of unvalidated addresses are under way
// (quicconf.Gate).
func listenDoQ(o Options, certificates *tls.Config) (*listener, error) {
	addr := o.Config.Listen.DoQ
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen.doq %s: %w", addr, err)
	}
	lim := dnsserver.DefaultLimits()
	gate := &quicconf.Gate{}
	if n := o.Config.Limits.Connections; n > 0 {
		gate.Rate, gate.Burst = float64(n), n
	}
	// QUIC's idle timeout is longer than the server's, which closes an
	// idle connection with DOQ_NO_ERROR first (dnsserver.Server.ServeQUIC).
	qconf := quicconf.Config(quicconf.Limits{MaxStreams: lim.MaxInFlight, IdleTimeout: lim.IdleTimeout + 10*time.Second})
	ln, err := quicconf.Listen(pc, quicconf.TLS(certificates, "doq"), qconf, gate)
	if err != nil {
		pc.Close()
		return nil, fmt.Errorf("listen.doq %s: %w", addr, err)
	}
	srv := &dnsserver.Server{Resolver: o.Resolver, Limits: lim, OnDrop: logDrop(o, "doq"), Admit: o.Admit, HoldConn: o.HoldConn,
		Proto: "doq", Wiretap: o.Wiretap}
	return &listener{name: "doq", pc: pc, quic: ln, gate: gate, dns: srv}, nil
}
