package main

import (
	"context"
	"crypto/tls"
	be "encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/quic-go/quic-go"

	"github.com/dohfwd/dohfwd/engine/upstreamtest"
	"github.com/dohfwd/dohfwd/scripts/testtool"
)

// startDoQ runs dohfwd on yaml (scopeYAML or limitsYAML) with a
// DNS-over-QUIC listener added and the test PKI; it returns the process
// and the DoQ address.
func startDoQ(t *testing.T, yaml string) (*dohfwd, string) {
	t.Helper()
	yaml = strings.Replace(yaml, "listen:\n", "listen:\n  doq: 127.0.0.1:0\n", 1)
	d := startDohfwd(t, yaml, newPKI(t))
	return d, d.listenerAddr("doq")
}

// dialDoQ opens a QUIC connection with ALPN doq, verifying the server
// against the test CA.
func dialDoQ(t *testing.T, d *dohfwd, addr string) *quic.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := quic.DialAddr(ctx, addr, &tls.Config{RootCAs: d.pki.Pool, ServerName: "localhost", NextProtos: []string{"doq"}}, &quic.Config{})
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.CloseWithError(0, "") })
	return c
}

// doqFrame is q packed with ID id and framed with its two-byte length.
func doqFrame(q *dns.Msg, id uint16) []byte {
	wire, _ := q.Pack()
	be.BigEndian.PutUint16(wire, id)
	return append(be.BigEndian.AppendUint16(nil, uint16(len(wire))), wire...)
}

// askDoQ sends frame on a new stream, ends it (FIN) and reads the framed
// answer to the stream's end.
func askDoQ(c *quic.Conn, frame []byte) (*dns.Msg, error) {
	st, err := c.OpenStream()
	if err != nil {
		return nil, err
	}
	st.SetDeadline(time.Now().Add(10 * time.Second))
	st.Write(frame)
	st.Close()
	b, err := io.ReadAll(st)
	if err != nil {
		return nil, err
	}
	if len(b) < 2 || int(be.BigEndian.Uint16(b)) != len(b)-2 {
		return nil, errors.New("answer not one framed message")
	}
	m := new(dns.Msg)
	return m, m.Unpack(b[2:])
}

// wantClosedWith waits for c to be closed by the server with code.
func wantClosedWith(t *testing.T, c *quic.Conn, code quic.ApplicationErrorCode) {
	t.Helper()
	select {
	case <-c.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("connection not closed; want application error %#x", code)
	}
	var ae *quic.ApplicationError
	if err := context.Cause(c.Context()); !errors.As(err, &ae) || !ae.Remote || ae.ErrorCode != code {
		t.Fatalf("closed with %v; want the server's application error %#x", err, code)
	}
}

// kdig over QUIC (RFC 9250), verifying the certificate against the test
// CA, gets the upstream's answer; its padded query gets an answer padded
// to 468 bytes (RFC 8467), as over DoT.
func TestKdigOverQUIC(t *testing.T) {
	t.Parallel()
	d, doq := startDoQ(t, scopeYAML(startNSD(t)))
	host, port, _ := net.SplitHostPort(doq)
	out := runTool(t, "kdig", "@"+host, "-p", port, "+tls-ca="+d.pki.CA, "+tls-hostname=localhost",
		"+quic", "+padding", "v6.e2e.test", "AAAA")
	if !strings.Contains(out, "status: NOERROR") || !strings.Contains(out, "2001:db8::1") ||
		!strings.Contains(out, "QUIC session") || !strings.Contains(out, "Received 468 B") {
		t.Errorf("kdig +quic:\n%s", out)
	}
	out = runTool(t, "kdig", "@"+host, "-p", port, "+tls-ca="+d.pki.CA, "+tls-hostname=localhost", "+quic", "www.e2e.test", "A")
	if !strings.Contains(out, "status: NOERROR") || !strings.Contains(out, "127.0.0.1") {
		t.Errorf("kdig +quic:\n%s", out)
	}
	// The upstream attempt and the question name the client's protocol.
	for _, msg := range []string{"attempt", "question"} {
		d.waitEvent(5*time.Second, func(ev map[string]any) bool {
			return ev["message"] == msg && ev["qname"] == "v6.e2e.test." && ev["proto"] == "doq"
		})
	}
}

// RFC 9250's rules, from quic-go's client: a query with ID 0 gets its
// answer with ID 0 and the stream's end; a stream the client resets is
// cancelled with DOQ_REQUEST_CANCELLED and the connection goes on; a
// query with another ID, or two messages on one stream, close the
// connection with DOQ_PROTOCOL_ERROR.
func TestDoQStreamRules(t *testing.T) {
	t.Parallel()
	d, doq := startDoQ(t, scopeYAML(startNSD(t)))
	c := dialDoQ(t, d, doq)
	if p := c.ConnectionState().TLS.NegotiatedProtocol; p != "doq" {
		t.Errorf("ALPN %q, want doq", p)
	}
	m, err := askDoQ(c, doqFrame(newQuery("www.e2e.test", dns.TypeA), 0))
	if err != nil || m.Id != 0 || m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 {
		t.Fatalf("answer %v, %v; want one A record with ID 0", m, err)
	}

	t.Run("reset stream", func(t *testing.T) {
		st, err := c.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		st.SetDeadline(time.Now().Add(10 * time.Second))
		st.Write([]byte{0}) // half a length
		st.CancelWrite(0x3)
		_, err = io.ReadAll(st)
		var se *quic.StreamError
		if !errors.As(err, &se) || !se.Remote || se.ErrorCode != 0x3 {
			t.Fatalf("read after reset: %v; want the server's DOQ_REQUEST_CANCELLED (0x3)", err)
		}
		if m, err := askDoQ(c, doqFrame(newQuery("www.e2e.test", dns.TypeA), 0)); err != nil || len(m.Answer) != 1 {
			t.Fatalf("the connection after a reset stream: %v, %v", m, err)
		}
	})
	t.Run("non-zero ID", func(t *testing.T) {
		c := dialDoQ(t, d, doq)
		askDoQ(c, doqFrame(newQuery("www.e2e.test", dns.TypeA), 0x1234))
		wantClosedWith(t, c, 0x2)
	})
	t.Run("two messages on a stream", func(t *testing.T) {
		c := dialDoQ(t, d, doq)
		f := doqFrame(newQuery("www.e2e.test", dns.TypeA), 0)
		askDoQ(c, append(f, f...))
		wantClosedWith(t, c, 0x2)
	})
	t.Run("not a query", func(t *testing.T) {
		c := dialDoQ(t, d, doq)
		resp := make([]byte, 12)
		resp[2] = 0x80 // QR: a response, not a query
		askDoQ(c, append([]byte{0, 12}, resp...))
		wantClosedWith(t, c, 0x2)
	})
}

// A QUIC connection counts against the connection limits like a TCP one:
// with limits.client_connections 1 a client's second connection is closed
// with DOQ_EXCESSIVE_LOAD and counted as refused, while its first goes on.
// The DoQ questions are counted under transport "doq" in /metrics and
// /status.
func TestDoQConnectionsPerClient(t *testing.T) {
	t.Parallel()
	d, doq := startDoQ(t, limitsYAML("  client_connections: 1\n", startNSD(t)))
	first := dialDoQ(t, d, doq)
	if m, err := askDoQ(first, doqFrame(newQuery("www.e2e.test", dns.TypeA), 0)); err != nil || len(m.Answer) != 1 {
		t.Fatalf("first connection: %v, %v", m, err)
	}
	second := dialDoQ(t, d, doq)
	wantClosedWith(t, second, 0x4)
	if n := d.metric(`dohfwd_limit_refusals_total{limit="client_connections"}`); n != 1 {
		t.Errorf("client_connections refusals %v, want 1", n)
	}
	if m, err := askDoQ(first, doqFrame(newQuery("v6.e2e.test", dns.TypeAAAA), 0)); err != nil || len(m.Answer) != 1 {
		t.Fatalf("first connection after the refusal: %v, %v", m, err)
	}
	if n := d.metric(`dohfwd_dns_questions_total{transport="doq"}`); n != 2 {
		t.Errorf(`dohfwd_dns_questions_total{transport="doq"} = %v, want 2`, n)
	}
	tr, _ := d.status()["transports"].(map[string]any)
	if doq, _ := tr["doq"].(map[string]any); doq["questions"] != 2.0 {
		t.Errorf("/status transports %v, want doq.questions 2", tr)
	}
}

// A client may hold at most 250 open streams (questions) on one
// connection, as on DoT and HTTP/2: the 251st cannot be opened until one
// ends.
func TestDoQStreamsPerConnection(t *testing.T) {
	t.Parallel()
	d, doq := startDoQ(t, scopeYAML(startNSD(t)))
	c := dialDoQ(t, d, doq)
	var open []*quic.Stream
	for i := range 251 {
		st, err := c.OpenStream()
		if err != nil {
			if i != 250 {
				t.Fatalf("stream %d refused: %v; want 250 open", i+1, err)
			}
			break
		}
		if i == 250 {
			t.Fatal("a 251st stream opened")
		}
		st.Write([]byte{0}) // half a length: the question stays open
		open = append(open, st)
	}
	open[0].CancelWrite(0x3) // one ends ...
	open[0].CancelRead(0x3)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.OpenStreamSync(ctx) // ... and frees a place
	if err != nil {
		t.Fatalf("no stream after one ended: %v", err)
	}
	st.CancelWrite(0x3)
}

// New connections that come faster than limits.connections per second
// must validate their address with a Retry (RFC 9000, section 8.1.2): a
// real client answers it and is served, and the Retries are counted.
func TestDoQRetryWhenConnectionsComeTooFast(t *testing.T) {
	t.Parallel()
	d, doq := startDoQ(t, limitsYAML("  connections: 4\n", startNSD(t)))
	for i := range 20 {
		c := dialDoQ(t, d, doq)
		if m, err := askDoQ(c, doqFrame(newQuery("www.e2e.test", dns.TypeA), 0)); err != nil || len(m.Answer) != 1 {
			t.Fatalf("connection %d: %v, %v", i+1, m, err)
		}
		c.CloseWithError(0, "")
		// The connection is counted as open until the server sees it end.
		for end := time.Now().Add(5 * time.Second); d.status()["connections"] != 0.0 && time.Now().Before(end); {
			time.Sleep(5 * time.Millisecond)
		}
	}
	if n := d.metric(`dohfwd_quic_retries_total{transport="doq"}`); n < 1 {
		t.Errorf("dohfwd_quic_retries_total = %v: 20 connections at once were never asked for a Retry", n)
	}
	if n := d.metric(`dohfwd_limit_refusals_total{limit="connections"}`); n != 0 {
		t.Errorf("%v connections refused", n)
	}
}

// DoQ serves the TLS listeners' certificate as it changes: once the
// certificate files are replaced, a new connection gets the new
// certificate, while a connection opened before keeps being answered.
func TestDoQCertificateRotationKeepsConnections(t *testing.T) {
	t.Parallel()
	d, doq := startDoQ(t, scopeYAML(startNSD(t)))
	old := dialDoQ(t, d, doq)
	oldCert := old.ConnectionState().TLS.PeerCertificates[0]

	next := newPKI(t)
	for _, f := range [][2]string{{next.Cert, d.pki.Cert}, {next.Key, d.pki.Key}} {
		b, err := os.ReadFile(f[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f[1], b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	d.waitEvent(10*time.Second, func(ev map[string]any) bool { return ev["message"] == "certificate reloaded from files" })

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fresh, err := quic.DialAddr(ctx, doq, &tls.Config{RootCAs: next.Pool, ServerName: "localhost", NextProtos: []string{"doq"}}, nil)
	if err != nil {
		t.Fatalf("a client trusting the new CA: %v", err)
	}
	defer fresh.CloseWithError(0, "")
	if got := fresh.ConnectionState().TLS.PeerCertificates[0]; got.Equal(oldCert) {
		t.Error("a new connection still gets the old certificate")
	}
	for _, c := range []*quic.Conn{old, fresh} {
		if m, err := askDoQ(c, doqFrame(newQuery("www.e2e.test", dns.TypeA), 0)); err != nil || len(m.Answer) != 1 {
			t.Errorf("after the rotation: %v, %v", m, err)
		}
	}
}

// AdGuard dnsproxy with dohfwd's DoQ listener as its upstream
// (`-u quic://`), verifying the certificate against the test CA, answers
// plain DNS clients with what dohfwd's upstream knows, and dohfwd counts
// the questions under transport doq.
func TestDnsproxyOverQUIC(t *testing.T) {
	t.Parallel()
	d, doq := startDoQ(t, scopeYAML(startNSD(t)))
	askThroughDnsproxy(t, d, "quic://"+doq)
	if n := d.metric(`dohfwd_dns_questions_total{transport="doq"}`); n < 2 {
		t.Errorf(`dohfwd_dns_questions_total{transport="doq"} = %v, want 2 or more`, n)
	}
}

// SIGTERM lets the DoQ questions in flight be answered, then closes the
// connection with DOQ_NO_ERROR.
func TestSIGTERMDrainsDoQ(t *testing.T) {
	t.Parallel()
	slow := upstreamtest.Start(t, upstreamtest.Delay(800*time.Millisecond, upstreamtest.Answer("@ 60 IN A 192.0.2.9")))
	d, doq := startDoQ(t, scopeYAML(slow.String()))
	c := dialDoQ(t, d, doq)
	const n = 5
	answers := make(chan error, n)
	for i := range n {
		go func() {
			m, err := askDoQ(c, doqFrame(newQuery(fmt.Sprintf("q%d.drain.test", i), dns.TypeA), 0))
			if err == nil && len(m.Answer) != 1 {
				err = fmt.Errorf("answer %v", m)
			}
			answers <- err
		}()
	}
	for end := time.Now().Add(5 * time.Second); len(slow.Queries()) < n && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	for range n {
		if err := <-answers; err != nil {
			t.Errorf("lost in the drain: %v", err)
		}
	}
	wantClosedWith(t, c, 0x0)
	if code := d.wait(15 * time.Second); code != 0 {
		t.Fatalf("exit code %d, want 0", code)
	}
}

// initialCapture is a PacketConn that keeps the first datagram quic-go's
// client writes (its Initial) and delivers nothing.
type initialCapture struct {
	got    chan []byte
	closed chan struct{}
}

func (c *initialCapture) WriteTo(b []byte, _ net.Addr) (int, error) {
	select {
	case c.got <- append([]byte(nil), b...):
	default:
	}
	return len(b), nil
}
func (c *initialCapture) ReadFrom([]byte) (int, net.Addr, error) {
	<-c.closed
	return 0, nil, net.ErrClosed
}
func (c *initialCapture) Close() error { return nil }
func (c *initialCapture) LocalAddr() net.Addr {
	return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
}
func (c *initialCapture) SetDeadline(time.Time) error      { return nil }
func (c *initialCapture) SetReadDeadline(time.Time) error  { return nil }
func (c *initialCapture) SetWriteDeadline(time.Time) error { return nil }

// clientInitials makes n client Initial packets for to, each of a new
// connection (its own connection IDs and ClientHello), none sent.
func clientInitials(t *testing.T, n int, to net.Addr) [][]byte {
	t.Helper()
	var out [][]byte
	for len(out) < n {
		c := &initialCapture{got: make(chan []byte, 1), closed: make(chan struct{})}
		tr := &quic.Transport{Conn: c}
		ctx, cancel := context.WithCancel(context.Background())
		// X25519 alone keeps the ClientHello in one Initial: the server
		// has all it needs to answer with its whole first flight.
		go tr.Dial(ctx, to, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"doq"},
			CurvePreferences: []tls.CurveID{tls.X25519}}, nil)
		select {
		case p := <-c.got:
			out = append(out, p)
		case <-time.After(10 * time.Second):
			t.Fatal("quic-go wrote no Initial")
		}
		cancel()
		close(c.closed) // before the transport's Close, which waits for its reader
		tr.Close()
	}
	return out
}

// Initial packets from an address that never answers, as from a spoofed
// one: the server sends it at most three times what it received until
// the address is validated (RFC 9000, section 8.1), and once 64
// handshakes of unvalidated addresses are under way, new Initials get a
// stateless Retry instead of connection state, and are counted.
func TestDoQUnvalidatedHandshakesAndAmplification(t *testing.T) {
	t.Parallel()
	d, doq := startDoQ(t, scopeYAML("127.0.0.1:1"))
	to, _ := net.ResolveUDPAddr("udp", doq)
	packets := clientInitials(t, 100, to)

	spoofed, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer spoofed.Close()
	spoofed.SetReadBuffer(8 << 20)
	type tally struct{ received, retries, retryBytes int }
	read := make(chan tally)
	go func() {
		var got tally
		buf := make([]byte, 2048)
		for {
			n, _, err := spoofed.ReadFromUDP(buf)
			if err != nil {
				read <- got
				return
			}
			got.received += n
			if buf[0]&0xf0 == 0xf0 { // long header, QUIC v1 packet type 3: Retry
				got.retries++
				got.retryBytes += n
			}
		}
	}()
	sent := 0
	for _, p := range packets {
		n, _ := spoofed.WriteToUDP(p, to)
		sent += n
		time.Sleep(2 * time.Millisecond) // quic-go drops Retry packets it cannot send at once
	}
	spoofed.SetReadDeadline(time.Now().Add(2 * time.Second)) // any window: the limit holds at all times
	got := <-read
	received, retries := got.received, got.retries
	t.Logf("sent %d bytes in %d Initials, received %d bytes, %d Retry packets (%d bytes): %.3fx per handshake",
		sent, len(packets), received, retries, got.retryBytes,
		float64(received-got.retryBytes)/float64(len(packets)-retries)/float64(sent/len(packets)))
	// Each Initial is as long (quic-go pads them); the ones answered
	// with a Retry hold no state, the others may draw 3x their length.
	if handshakes := len(packets) - retries; received-got.retryBytes > 3*handshakes*len(packets[0]) {
		t.Errorf("%d bytes besides Retry packets for %d handshakes of %d-byte Initials: over the 3x amplification limit",
			received-got.retryBytes, handshakes, len(packets[0]))
	}
	if retries < len(packets)-64 {
		t.Errorf("%d Retry packets for %d Initials; want one for each past the 64th handshake", retries, len(packets))
	}
	if n := d.metric(`dohfwd_quic_retries_total{transport="doq"}`); int(n) != retries {
		t.Errorf("dohfwd_quic_retries_total = %v, the client saw %d Retry packets", n, retries)
	}
	// A real client still gets through: it answers the Retry.
	c := dialDoQ(t, d, doq)
	if m, err := askDoQ(c, doqFrame(newQuery("localhost", dns.TypeA), 0)); err != nil || m.Rcode != dns.RcodeSuccess {
		t.Fatalf("a real client during the handshakes: %v, %v", m, err)
	}
}

// askThroughDnsproxy runs AdGuard dnsproxy as a plain DNS server whose
// upstream is dohfwd at upstream (quic://… or h3://…), trusting the test
// CA alone, and checks that two questions come back as dohfwd's upstream
// knows them: www.e2e.test A and v6.e2e.test AAAA.
func askThroughDnsproxy(t *testing.T, d *dohfwd, upstream string) {
	t.Helper()
	listen := strconv.Itoa(freePort(t))
	cmd := exec.Command(testtool.Find(t, "dnsproxy", "scripts/setup.d/25-quic-clients.sh builds it"),
		"-l", "127.0.0.1", "-p", listen, "-u", upstream, "--timeout=5s")
	cmd.Env = append(os.Environ(), "SSL_CERT_FILE="+d.pki.CA) // Go's roots: the test CA alone
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("dnsproxy:\n%s", out.String())
		}
	})
	c := &dns.Client{Timeout: 2 * time.Second}
	var m *dns.Msg
	var err error
	for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if m, _, err = c.Exchange(newQuery("www.e2e.test", dns.TypeA), "127.0.0.1:"+listen); err == nil {
			break
		}
	}
	if err != nil || m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 || m.Answer[0].(*dns.A).A.String() != "127.0.0.1" {
		t.Fatalf("through dnsproxy: %v, %v", m, err)
	}
	m, _, err = c.Exchange(newQuery("v6.e2e.test", dns.TypeAAAA), "127.0.0.1:"+listen)
	if err != nil || len(m.Answer) != 1 {
		t.Fatalf("through dnsproxy: %v, %v", m, err)
	}
}
