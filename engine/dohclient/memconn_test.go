package dohclient_test

import (
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// memConn is one end of an in-memory connection whose writes never
// block (each direction an unbounded buffer), unlike net.Pipe's: two
// HTTP/2 peers both write from their read loops, which a synchronous
// pipe deadlocks. It waits on channels only, so a synctest bubble sees
// its waits as durable and moves its clock past them.
type memConn struct {
	in, out *memHalf
	mu      sync.Mutex
	rdl     time.Time
}

// memHalf is one direction.
type memHalf struct {
	mu     sync.Mutex
	buf    []byte
	closed bool
	ready  chan struct{} // a token when there are bytes or a close
}

func newMemHalf() *memHalf { return &memHalf{ready: make(chan struct{}, 1)} }

func (h *memHalf) signal() {
	select {
	case h.ready <- struct{}{}:
	default:
	}
}

// memPipe returns the two ends of a connection.
func memPipe() (net.Conn, net.Conn) {
	a, b := newMemHalf(), newMemHalf()
	return &memConn{in: a, out: b}, &memConn{in: b, out: a}
}

func (c *memConn) Read(p []byte) (int, error) {
	for {
		c.in.mu.Lock()
		if len(c.in.buf) > 0 {
			n := copy(p, c.in.buf)
			c.in.buf = c.in.buf[n:]
			if len(c.in.buf) > 0 {
				c.in.signal()
			}
			c.in.mu.Unlock()
			return n, nil
		}
		if c.in.closed {
			c.in.mu.Unlock()
			return 0, io.EOF
		}
		c.in.mu.Unlock()
		c.mu.Lock()
		dl := c.rdl
		c.mu.Unlock()
		var timeout <-chan time.Time
		if !dl.IsZero() {
			d := time.Until(dl)
			if d <= 0 {
				return 0, os.ErrDeadlineExceeded
			}
			t := time.NewTimer(d)
			timeout = t.C
			defer t.Stop()
		}
		select {
		case <-c.in.ready:
		case <-timeout:
			return 0, os.ErrDeadlineExceeded
		}
	}
}

func (c *memConn) Write(p []byte) (int, error) {
	c.out.mu.Lock()
	defer c.out.mu.Unlock()
	if c.out.closed {
		return 0, io.ErrClosedPipe
	}
	c.out.buf = append(c.out.buf, p...)
	c.out.signal()
	return len(p), nil
}

// Close ends both directions: the peer reads EOF, a local Read returns.
func (c *memConn) Close() error {
	for _, h := range []*memHalf{c.in, c.out} {
		h.mu.Lock()
		h.closed = true
		h.mu.Unlock()
		h.signal()
	}
	return nil
}

func (c *memConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.rdl = t
	c.mu.Unlock()
	c.in.signal() // a waiting Read looks at the new deadline
	return nil
}

func (c *memConn) SetDeadline(t time.Time) error    { return c.SetReadDeadline(t) }
func (c *memConn) SetWriteDeadline(time.Time) error { return nil }
func (c *memConn) LocalAddr() net.Addr              { return memAddr{} }
func (c *memConn) RemoteAddr() net.Addr             { return memAddr{} }

type memAddr struct{}

func (memAddr) Network() string { return "mem" }
func (memAddr) String() string  { return "mem" }
