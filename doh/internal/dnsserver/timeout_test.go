package dnsserver

import (
	"net"
	"testing"
	"testing/synctest"
	"time"

	"github.com/miekg/dns"
)

// pipeListener hands out one end of net.Pipe per Dial, so a test can run
// the server on synctest's clock.
type pipeListener struct {
	conns  chan net.Conn
	closed chan struct{}
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	select {
	case <-l.closed:
	default:
		close(l.closed)
	}
	return nil
}

func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53} }

func (l *pipeListener) Dial() net.Conn {
	client, server := net.Pipe()
	l.conns <- server
	return client
}

// With the default limits, a query stalled half-sent is given up after
// exactly ReadTimeout (10 s), and an idle connection after IdleTimeout.
func TestDefaultReadAndIdleTimeouts(t *testing.T) {
	if d := DefaultLimits(); d.ReadTimeout != 10*time.Second || d.IdleTimeout != 2*time.Minute {
		t.Fatalf("default limits %+v", d)
	}
	synctest.Test(t, func(t *testing.T) {
		ln := newPipeListener()
		s := &Server{Resolver: new(fixedResolver)}
		go s.ServeStream(ln)
		defer s.Close()

		stalled := ln.Dial()
		b := frame(t, newQuery("half.example.", dns.TypeA, 1))
		go stalled.Write(b[:len(b)/2])
		gone := watchClose(stalled)

		idle := ln.Dial()
		idleGone := watchClose(idle)

		time.Sleep(10*time.Second - time.Millisecond)
		synctest.Wait()
		if isClosed(gone) {
			t.Fatal("closed before ReadTimeout")
		}
		time.Sleep(2 * time.Millisecond)
		synctest.Wait()
		if !isClosed(gone) {
			t.Fatal("still open after ReadTimeout")
		}
		if isClosed(idleGone) {
			t.Fatal("the idle connection was closed at ReadTimeout")
		}
		time.Sleep(2*time.Minute - 10*time.Second)
		synctest.Wait()
		if !isClosed(idleGone) {
			t.Fatal("the idle connection is still open after IdleTimeout")
		}
	})
}

// watchClose returns a channel closed when the server hangs up c.
func watchClose(c net.Conn) chan struct{} {
	ch := make(chan struct{})
	go func() {
		buf := make([]byte, 512)
		for {
			if _, err := c.Read(buf); err != nil {
				close(ch)
				return
			}
		}
	}()
	return ch
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
