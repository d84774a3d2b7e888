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

// transportCounters reads the DNS listeners' counters by transport (dot,
// doq, dns: the plain listener's UDP and TCP share a server), for /status
// and /metrics.
func transportCounters(listeners []*listener) func() map[string]admin.TransportCounters {
	type source struct {
		srv  *dnsserver.Server
		gate *quicconf.Gate // nil unless QUIC
	}
	byName := map[string]source{}
	for _, l := range listeners {
		if l.dns == nil {
			continue
		}
		name := l.name
		if name == "dns-udp" || name == "dns-tcp" {
			name = "dns"
		}
		byName[name] = source{srv: l.dns, gate: l.gate}
	}
	return func() map[string]admin.TransportCounters {
		out := make(map[string]admin.TransportCounters, len(byName))
		for name, src := range byName {
			c := admin.TransportCounters{Questions: src.srv.Questions()}
			if src.gate != nil {
				c.QUICRetries = src.gate.Retries()
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
