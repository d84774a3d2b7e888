package limits

import (
	"io"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/dohfwd/dohfwd/doh/internal/rawtcp"
)

// dialFrom opens a loopback connection from src to ln.
func dialFrom(t *testing.T, src string, ln net.Listener) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedByServer reports whether the server closed c (EOF or reset) rather
// than keeping it open.
func closedByServer(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	_, err := c.Read(make([]byte, 1))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false
	}
	return err != nil
}

// Connections per client (/32 here, so two loopback addresses are two
// clients) and in total, over real loopback TCP; a closed connection
// gives its slot back.
func TestListenerCountsConnections(t *testing.T) {
	l := New(Config{ClientConnections: 2, Connections: 3, PrefixV4: 32}, Options{})
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := l.Listen(raw)
	defer ln.Close()
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
			go io.Copy(io.Discard, c) // the server reads: a refused one ends
		}
	}()
	a1, a2 := dialFrom(t, "127.0.0.1", raw), dialFrom(t, "127.0.0.1", raw)
	s1, s2 := <-accepted, <-accepted
	a3 := dialFrom(t, "127.0.0.1", raw)
	if !closedByServer(a3) {
		t.Fatal("third connection of one client kept open")
	}
	b1 := dialFrom(t, "127.0.0.2", raw)
	<-accepted
	b2 := dialFrom(t, "127.0.0.2", raw)
	if !closedByServer(b2) {
		t.Fatal("fourth connection in all kept open")
	}
	if closedByServer(a1) || closedByServer(a2) || closedByServer(b1) {
		t.Fatal("an admitted connection was closed")
	}
	if n := l.Connections(); n != 3 {
		t.Fatalf("%d connections counted, want 3", n)
	}
	s1.Close()
	s2.Close()
	a4 := dialFrom(t, "127.0.0.1", raw)
	<-accepted
	if closedByServer(a4) {
		t.Fatal("a connection after two closed was refused")
	}
	r := l.Refused()
	if r[LimitClientConnections] != 1 || r[LimitConnections] != 1 {
		t.Fatalf("refusals %v, want one client_connections and one connections", r)
	}
}

// HoldConn counts a connection that comes through no listener (QUIC)
// like Listen counts a TCP one: per client and in total, refused past
// either, its slots back once released (twice counts once).
func TestHoldConnCountsLikeAConnection(t *testing.T) {
	l := New(Config{ClientConnections: 1, Connections: 2, PrefixV4: 32}, Options{})
	a, b, c := netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.3"), netip.MustParseAddr("127.0.0.4")
	releaseA, ok := l.HoldConn(a)
	if !ok {
		t.Fatal("first connection refused")
	}
	if _, ok := l.HoldConn(a); ok {
		t.Fatal("a second connection of one client let in past client_connections 1")
	}
	if _, ok := l.HoldConn(b); !ok {
		t.Fatal("another client refused")
	}
	if _, ok := l.HoldConn(c); ok {
		t.Fatal("a third connection let in past connections 2")
	}
	releaseA()
	releaseA()
	if l.Connections() != 1 {
		t.Fatalf("%d connections open after a release, want 1", l.Connections())
	}
	if _, ok := l.HoldConn(a); !ok {
		t.Fatal("the client's slot was not given back")
	}
	if r := l.Refused(); r[LimitClientConnections] != 1 || r[LimitConnections] != 1 {
		t.Errorf("refusals %v", r)
	}
}

// A connection the client listeners accept comes as a rawtcp.Conn: it
// is still a direct one, refused at Accept (never handed on) when its
// client is over the limit, as a *net.TCPConn is; only connections
// behind a PROXY header wait for their first read.
func TestRawTCPConnRefusedAtAccept(t *testing.T) {
	l := New(Config{ClientConnections: 1, PrefixV4: 32}, Options{})
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := l.Listen(rawtcp.Listen(raw))
	defer ln.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	dialFrom(t, "127.0.0.1", raw)
	first := <-accepted
	if _, ok := first.(*conn).Conn.(*rawtcp.Conn); !ok && runtime.GOOS == "linux" {
		t.Fatalf("accepted %T underneath, want a rawtcp.Conn", first.(*conn).Conn)
	}
	over := dialFrom(t, "127.0.0.1", raw)
	if !closedByServer(over) {
		t.Fatal("second connection of one client kept open")
	}
	select {
	case c := <-accepted:
		t.Fatalf("a refused connection was handed on (%T): refused at its first read, not at Accept", c)
	case <-time.After(100 * time.Millisecond):
	}
}
