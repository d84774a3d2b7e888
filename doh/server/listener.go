package server

import (
	"context"
	"errors"
	"net"
	"net/http"

	"github.com/dohfwd/dohfwd/doh/admin"
	"github.com/dohfwd/dohfwd/doh/internal/dnsserver"
	"github.com/dohfwd/dohfwd/doh/internal/quicconf"
)

func (l *listener) addr() net.Addr {
	if l.pc != nil {
		return l.pc.LocalAddr()
	}
	return l.ln.Addr()
}

// serve serves until Shutdown or Close; it returns only other errors.
func (l *listener) serve() error {
	var err error
	switch {
	case l.h3 != nil:
		err = l.h3.Serve(l.pc)
	case l.quic != nil:
		err = l.dns.ServeQUIC(l.quic)
	case l.dns != nil && l.pc != nil:
		err = l.dns.ServePacket(l.pc)
	case l.dns != nil:
		err = l.dns.ServeStream(l.ln)
	default:
		err = l.srv.Serve(l.ln)
	}
	if errors.Is(err, http.ErrServerClosed) || errors.Is(err, dnsserver.ErrServerClosed) {
		return nil
	}
	return err
}

func (l *listener) shutdown(ctx context.Context) {
	if l.h3 != nil {
		l.h3.Shutdown(ctx)
		return
	}
	if l.dns != nil {
		l.dns.Shutdown(ctx)
		return
	}
	l.srv.Shutdown(ctx)
}

func (l *listener) close() {
	if l.h3 != nil {
		l.h3.Close()
		return
	}
	if l.dns != nil {
		l.dns.Close()
		return
	}
	l.srv.Close()
}

// transportCounters reads the listeners' counters by transport: the DNS
// listeners' questions (dot, doq, dns: the plain listener's UDP and TCP
// share a server) and the QUIC listeners' Retries (doq, h3), for /status
// and /metrics.
func transportCounters(listeners []*listener) func() map[string]admin.TransportCounters {
	type source struct {
		srv  *dnsserver.Server // nil unless a DNS listener
		gate *quicconf.Gate    // nil unless QUIC
	}
	byName := map[string]source{}
	for _, l := range listeners {
		if l.dns == nil && l.gate == nil {
			continue
		}
		name := l.name
		switch name {
		case "dns-udp", "dns-tcp":
			name = "dns"
		case "http3":
			name = "h3"
		}
		byName[name] = source{srv: l.dns, gate: l.gate}
	}
	return func() map[string]admin.TransportCounters {
		out := make(map[string]admin.TransportCounters, len(byName))
		for name, src := range byName {
			var c admin.TransportCounters
			if src.srv != nil {
				n := src.srv.Questions()
				c.Questions = &n
			}
			if src.gate != nil {
				n := src.gate.Retries()
				c.QUICRetries = &n
			}
			out[name] = c
		}
		return out
	}
}

// inFlight counts the DNS listeners' questions being answered.
func inFlight(listeners []*listener) (n int64) {
	for _, l := range listeners {
		if l.dns != nil {
			n += l.dns.InFlight()
		}
	}
	return n
}
