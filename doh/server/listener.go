package server

import (
	"context"
	"errors"
	"net"
	"net/http"

	"github.com/dohfwd/dohfwd/doh/internal/dnsserver"
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

// inFlight counts the DNS listeners' questions being answered.
func inFlight(listeners []*listener) (n int64) {
	for _, l := range listeners {
		if l.dns != nil {
			n += l.dns.InFlight()
		}
	}
	return n
}
