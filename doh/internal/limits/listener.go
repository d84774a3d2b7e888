package limits

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
)

// ErrRefused is what a refused connection's first Read returns.
var ErrRefused = errors.New("limits: connection refused: too many connections")

// Listen wraps ln so that its connections count against
// limits.connections and limits.client_connections. A connection over
// the total is closed as it is accepted. One over its client's limit is
// closed at accept when its peer is known then (a TCP connection), and
// at its first Read otherwise: behind PROXY protocol the client is known
// only once the header is read, which must not hold the accept loop.
func (l *Limiter) Listen(ln net.Listener) net.Listener { return &listener{Listener: ln, l: l} }

type listener struct {
	net.Listener
	l *Limiter
}

func (ln *listener) Accept() (net.Conn, error) {
	for {
		c, err := ln.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if !ln.l.openConn() {
			c.Close()
			continue
		}
		lc := &conn{Conn: c, l: ln.l}
		if direct(c) {
			if !lc.admit() {
				lc.Close()
				continue
			}
		}
		return lc, nil
	}
}

// conn releases what it holds once, at Close.
type conn struct {
	net.Conn
	l       *Limiter
	checked atomic.Bool // the client's limit was looked at

	mu      sync.Mutex
	refused bool
	closed  bool
	e       *entry // the client's hold, nil when not counted
}

// admit takes the client's connection slot, once.
func (c *conn) admit() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.checked.Load() && !c.closed {
		var client netip.Addr
		if ap, err := netip.ParseAddrPort(c.Conn.RemoteAddr().String()); err == nil {
			client = ap.Addr()
		}
		e, ok := c.l.acquireConn(client)
		c.e, c.refused = e, !ok
		c.checked.Store(true)
	}
	return !c.refused && !c.closed
}

func (c *conn) Read(b []byte) (int, error) {
	if !c.checked.Load() && !c.admit() {
		c.Close()
		return 0, ErrRefused
	}
	if c.refused {
		return 0, ErrRefused
	}
	return c.Conn.Read(b)
}

func (c *conn) Close() error {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		if c.e != nil {
			c.l.releaseConn(c.e)
		}
		c.l.closeConn()
	}
	c.mu.Unlock()
	return c.Conn.Close()
}

// HoldConn counts one connection that does not come through a
// net.Listener (a QUIC connection, whose address the handshake validated)
// against limits.connections and limits.client_connections, as Listen
// counts a TCP one. ok false: the connection is over a limit and must be
// closed; else release gives its slots back, once.
func (l *Limiter) HoldConn(client netip.Addr) (release func(), ok bool) {
	if !l.openConn() {
		return nil, false
	}
	e, ok := l.acquireConn(client.Unmap())
	if !ok {
		l.closeConn()
		return nil, false
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			if e != nil {
				l.releaseConn(e)
			}
			l.closeConn()
		})
	}, true
}

// direct reports whether c is a TCP connection as accepted, no PROXY
// header to read first: its client is known at once.
func direct(c net.Conn) bool {
	switch c := c.(type) {
	case *net.TCPConn:
		return true
	case interface{ TCP() *net.TCPConn }: // rawtcp.Conn
		return c.TCP() != nil
	}
	return false
}
