package main

import (
	"context"
	"crypto/tls"
	be "encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/quic-go/quic-go"
)

// startDoQ runs dohfwd with a DNS-over-QUIC listener and the test PKI,
// extra lines added to its listen section; it returns the process and the
// DoQ address.
func startDoQ(t *testing.T, extra string, servers ...string) (*dohfwd, string) {
	t.Helper()
	yaml := strings.Replace(scopeYAML(servers...), "listen:\n", "listen:\n  doq: 127.0.0.1:0\n", 1) + extra
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
	d, doq := startDoQ(t, "", startNSD(t))
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
}

// RFC 9250's rules, from quic-go's client: a query with ID 0 gets its
// answer with ID 0 and the stream's end; a stream the client resets is
// cancelled with DOQ_REQUEST_CANCELLED and the connection goes on; a
// query with another ID, or two messages on one stream, close the
// connection with DOQ_PROTOCOL_ERROR.
func TestDoQStreamRules(t *testing.T) {
	t.Parallel()
	d, doq := startDoQ(t, "", startNSD(t))
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
