package dohclient_test

import (
	"context"
	"crypto/tls"
	"net"
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/dohclient"
)

// The timing cases (idle close, a server's idle close, a stalled
// handshake, a dead connection) run in a synctest bubble over in-memory
// connections, so their 2 s, 5 s and 30 s pass in no time and exactly.

// pipeNet dials in-memory connections (memConn) whose other end serve runs.
type pipeNet struct {
	serve func(net.Conn)
	mu    sync.Mutex
	ends  []net.Conn
	dials int
}

func (p *pipeNet) dial(_ context.Context, _ netip.Addr, _ netip.AddrPort) (net.Conn, error) {
	c, s := memPipe()
	p.mu.Lock()
	p.ends = append(p.ends, c, s)
	p.dials++
	p.mu.Unlock()
	go p.serve(s)
	return c, nil
}

func (p *pipeNet) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.ends {
		c.Close()
	}
}

// fakeServer is an h2Fake answering every question, closing
// connections idle for idle (none when 0). (Go's own HTTP/2 server cannot
// serve in more than one bubble: its pooled channels cross them.)
func fakeServer(t testing.TB, cert tls.Certificate, idle time.Duration) func(net.Conn) {
	f := &h2Fake{t: t, cert: cert, idle: idle, handle: func(fakeStream) fakeAction { return fakeAction{} }}
	return f.serve
}

var pipeAddr = netip.MustParseAddrPort("192.0.2.53:443")

// bubble runs f in a synctest bubble with a PKI made inside it (its
// certificates valid at the bubble's clock) and closes what f opened.
func bubble(t *testing.T, f func(t *testing.T, pki *testPKI, pn *pipeNet, c *dohclient.Client)) {
	synctest.Test(t, func(t *testing.T) {
		pki := newPKI(t)
		pn := &pipeNet{}
		c := dohclient.New(dohclient.Config{TLS: engine.NewUpstreamTLS(pki.Pool), Dial: pn.dial})
		defer synctest.Wait()
		defer pn.close()
		defer c.Close()
		f(t, pki, pn, c)
	})
}

// An unused connection is closed after the idle time (30 s by default),
// not before; the next question opens one and resumes the TLS session.
func TestIdleConnectionClosed(t *testing.T) {
	bubble(t, func(t *testing.T, pki *testPKI, pn *pipeNet, c *dohclient.Client) {
		pn.serve = fakeServer(t, pki.Leaf, 0)
		ep := endpoint(t, pipeAddr, testName)
		if _, _, err := exchange(t, c, ep, "a.example", 2*time.Second); err != nil {
			t.Fatal(err)
		}
		time.Sleep(engine.DefaultEncryptedIdle - time.Second)
		synctest.Wait()
		if n := c.OpenConnections(ep); n != 1 {
			t.Fatalf("%d connections open before the idle time, want 1", n)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if n := c.OpenConnections(ep); n != 0 {
			t.Fatalf("%d connections open after the idle time, want 0", n)
		}
		_, info, err := exchange(t, c, ep, "b.example", 2*time.Second)
		if err != nil || !info.New || !info.Resumed {
			t.Fatalf("after the idle close: %v %+v, want a new connection resuming its session", err, info)
		}
	})
}

// A server that closes idle connections (after 5 s: GOAWAY, then the
// close): the connection leaves the pool when it goes, and the next
// question is answered on a new one, no question lost.
func TestServerClosesIdleConnection(t *testing.T) {
	bubble(t, func(t *testing.T, pki *testPKI, pn *pipeNet, c *dohclient.Client) {
		pn.serve = fakeServer(t, pki.Leaf, 5*time.Second)
		ep := endpoint(t, pipeAddr, testName)
		if _, _, err := exchange(t, c, ep, "a.example", 2*time.Second); err != nil {
			t.Fatal(err)
		}
		time.Sleep(6 * time.Second)
		synctest.Wait()
		if n := c.OpenConnections(ep); n != 0 {
			t.Fatalf("%d connections open after the server's idle close, want 0", n)
		}
		_, info, err := exchange(t, c, ep, "b.example", 2*time.Second)
		if err != nil || !info.New || !info.Resumed {
			t.Fatalf("after the server's close: %v %+v, want an answer on a new, resumed connection", err, info)
		}
		if st := c.Stats(ep); st.Handshakes != 2 || st.Resumed != 1 || st.Failed != 0 {
			t.Fatalf("stats %+v", st)
		}
	})
}

// A server that accepts the connection and never answers the handshake:
// the attempt fails at its deadline, exactly, with class timeout.
func TestHandshakeStallBoundedByDeadline(t *testing.T) {
	bubble(t, func(t *testing.T, pki *testPKI, pn *pipeNet, c *dohclient.Client) {
		pn.serve = func(net.Conn) {} // reads nothing
		ep := endpoint(t, pipeAddr, testName)
		start := time.Now()
		_, _, err := exchange(t, c, ep, "a.example", 2*time.Second)
		wantClass(t, err, "handshake", engine.ErrTimeout)
		if d := time.Since(start); d != 2*time.Second {
			t.Fatalf("failed after %v, want the attempt's 2s", d)
		}
		if n := c.OpenConnections(ep); n != 0 {
			t.Fatalf("%d connections open, want 0", n)
		}
	})
}

// A pooled connection whose server went silent (no FIN, no reset): the
// question on it times out, the connection must answer a PING within
// 1 s, does not, and is closed, so the next question opens a new one
// instead of timing out on the dead one.
func TestDeadConnectionClosedAfterTimeout(t *testing.T) {
	bubble(t, func(t *testing.T, pki *testPKI, pn *pipeNet, c *dohclient.Client) {
		f := &h2Fake{t: t, cert: pki.Leaf, handle: func(s fakeStream) fakeAction {
			return fakeAction{silent: s.conn == 1 && s.id > 1}
		}}
		pn.serve = f.serve
		ep := endpoint(t, pipeAddr, testName)
		if _, _, err := exchange(t, c, ep, "a.example", 2*time.Second); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, _, err := exchange(t, c, ep, "b.example", 2*time.Second)
		wantClass(t, err, "receive", engine.ErrTimeout)
		if d := time.Since(start); d != 2*time.Second {
			t.Fatalf("timed out after %v, want 2s", d)
		}
		time.Sleep(time.Second + time.Millisecond)
		synctest.Wait()
		if n := c.OpenConnections(ep); n != 0 {
			t.Fatalf("%d connections open after the failed PING, want 0", n)
		}
		_, info, err := exchange(t, c, ep, "c.example", 2*time.Second)
		if err != nil || !info.New {
			t.Fatalf("after the dead connection: %v %+v, want an answer on a new connection", err, info)
		}
	})
}

// A client that goes away ends its exchange at once, whatever its
// context: a context.Context, or the front ends' engine.CancelContext
// (watched without a context of its own), with class closed, which the
// engine counts as cancelled, not against the server.
func TestClientGoneEndsExchange(t *testing.T) {
	bubble(t, func(t *testing.T, pki *testPKI, pn *pipeNet, c *dohclient.Client) {
		f := &h2Fake{t: t, cert: pki.Leaf, handle: func(s fakeStream) fakeAction { return fakeAction{silent: s.id > 1} }}
		pn.serve = f.serve
		ep := endpoint(t, pipeAddr, testName)
		if _, _, err := exchange(t, c, ep, "a.example", 2*time.Second); err != nil {
			t.Fatal(err)
		}
		std, cancel := context.WithCancel(context.Background())
		cc := new(engine.CancelContext)
		for _, tc := range []struct {
			ctx    context.Context
			cancel func()
		}{{std, cancel}, {cc, cc.Cancel}} {
			start := time.Now()
			time.AfterFunc(100*time.Millisecond, tc.cancel)
			_, _, err := c.ExchangeHTTPS(tc.ctx, ep, netip.Addr{}, query(t, "b.example"), make([]byte, 65535), start.Add(2*time.Second))
			wantClass(t, err, "receive", engine.ErrClosed)
			if d := time.Since(start); d != 100*time.Millisecond {
				t.Fatalf("%T: ended after %v, want at the cancel (100ms)", tc.ctx, d)
			}
		}
	})
}
