package dnsserver

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/quic-go/quic-go"

	"github.com/dohfwd/dohfwd/doh/internal/quicconf"
	"github.com/dohfwd/dohfwd/engine"
)

// startDoQ serves s over DNS over QUIC on 127.0.0.1 until the test ends;
// QUIC's own idle timeout is a minute, as the listener's is longer than
// the server's.
func startDoQ(t *testing.T, s *Server) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := testCert()
	ln, err := quicconf.Listen(pc, quicconf.TLS(&tls.Config{Certificates: []tls.Certificate{cert}}, "doq"),
		quicconf.Config(quicconf.Limits{MaxStreams: 10, IdleTimeout: time.Minute}), &quicconf.Gate{})
	if err != nil {
		t.Fatal(err)
	}
	go s.ServeQUIC(ln)
	t.Cleanup(func() { s.Close() })
	return pc.LocalAddr().String()
}

// askQUIC dials addr with ALPN doq and asks q (ID 0) on one stream; it
// returns the answer and its length on the wire.
func askQUIC(t *testing.T, addr string, q *dns.Msg) (*dns.Msg, int) {
	t.Helper()
	_, pool := testCert()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := quic.DialAddr(ctx, addr, &tls.Config{RootCAs: pool, ServerName: "localhost", NextProtos: []string{"doq"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseWithError(0, "")
	st, err := c.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	st.SetDeadline(time.Now().Add(10 * time.Second))
	q.Id = 0
	wire, _ := q.Pack()
	st.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(wire))), wire...))
	st.Close()
	b, err := io.ReadAll(st)
	if err != nil || len(b) < 2 || int(binary.BigEndian.Uint16(b)) != len(b)-2 {
		t.Fatalf("answer %x, %v", b, err)
	}
	m := new(dns.Msg)
	if err := m.Unpack(b[2:]); err != nil {
		t.Fatal(err)
	}
	return m, len(b) - 2
}

// A padded DoQ query gets an answer padded to a multiple of 468 bytes,
// as over DoT (RFC 8467); an unpadded one gets no padding.
func TestDoQPaddedQueryGetsPaddedAnswer(t *testing.T) {
	r := &fixedResolver{}
	addr := startDoQ(t, &Server{Resolver: r})
	q := new(dns.Msg).SetQuestion("pad.example.", dns.TypeA)
	q.SetEdns0(1232, false)
	q.IsEdns0().Option = append(q.IsEdns0().Option, &dns.EDNS0_PADDING{Padding: make([]byte, 100)})
	m, n := askQUIC(t, addr, q)
	if n%PaddingBlock != 0 || len(m.Answer) != 1 || m.Id != 0 {
		t.Errorf("padded query: %d-byte answer, ID %d, %d records", n, m.Id, len(m.Answer))
	}
	if _, n = askQUIC(t, addr, new(dns.Msg).SetQuestion("plain.example.", dns.TypeA)); n%PaddingBlock == 0 {
		t.Errorf("unpadded query got a %d-byte answer", n)
	}
}

// A client over its limits (Admit) gets REFUSED with EDE 18 over DoQ,
// and the resolver is not asked; the client Admit sees is the QUIC
// connection's address.
func TestDoQAdmitRefuses(t *testing.T) {
	r := &fixedResolver{}
	seen := make(chan netip.Addr, 1)
	addr := startDoQ(t, &Server{Resolver: r, Admit: func(c netip.Addr) (bool, time.Duration) { seen <- c; return false, time.Second }})
	q := new(dns.Msg).SetQuestion("refused.example.", dns.TypeA)
	q.SetEdns0(1232, false)
	m, _ := askQUIC(t, addr, q)
	var ede *dns.EDNS0_EDE
	if o := m.IsEdns0(); o != nil {
		for _, e := range o.Option {
			if x, ok := e.(*dns.EDNS0_EDE); ok {
				ede = x
			}
		}
	}
	if m.Rcode != dns.RcodeRefused || ede == nil || ede.InfoCode != dns.ExtendedErrorCodeProhibited || r.calls.Load() != 0 {
		t.Errorf("rcode %s, EDE %v, resolver asked %d times", dns.RcodeToString[m.Rcode], ede, r.calls.Load())
	}
	if c := <-seen; c != netip.MustParseAddr("127.0.0.1") {
		t.Errorf("Admit saw %v", c)
	}
}

// HoldConn refusing a connection closes it with DOQ_EXCESSIVE_LOAD; the
// release of an admitted one is called once it ends.
func TestDoQHoldConn(t *testing.T) {
	released := make(chan struct{})
	admitted := false
	addr := startDoQ(t, &Server{Resolver: &fixedResolver{}, HoldConn: func(netip.Addr) (func(), bool) {
		if admitted {
			return nil, false
		}
		admitted = true
		return func() { close(released) }, true
	}})
	askQUIC(t, addr, new(dns.Msg).SetQuestion("one.example.", dns.TypeA)) // closes its connection after
	<-released
	_, pool := testCert()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := quic.DialAddr(ctx, addr, &tls.Config{RootCAs: pool, ServerName: "localhost", NextProtos: []string{"doq"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-c.Context().Done()
	var ae *quic.ApplicationError
	if err := context.Cause(c.Context()); !errors.As(err, &ae) || ae.ErrorCode != DoQExcessiveLoad {
		t.Errorf("closed with %v, want DOQ_EXCESSIVE_LOAD", err)
	}
}

// A connection idle past Limits.IdleTimeout is closed with DOQ_NO_ERROR
// (RFC 9250, section 5.5), not left to QUIC's silent idle close; one
// with a question open is not.
func TestDoQIdleConnectionClosedWithNoError(t *testing.T) {
	slow := make(chan struct{})
	r := resolverFunc(func(ctx context.Context, query, dst []byte) engine.Response {
		<-slow
		return (&fixedResolver{}).ResolveWire(ctx, query, dst)
	})
	addr := startDoQ(t, &Server{Resolver: r, Limits: Limits{IdleTimeout: 100 * time.Millisecond}})
	_, pool := testCert()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := quic.DialAddr(ctx, addr, &tls.Config{RootCAs: pool, ServerName: "localhost", NextProtos: []string{"doq"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseWithError(0, "")
	st, _ := c.OpenStream()
	m := new(dns.Msg).SetQuestion("slow.example.", dns.TypeA)
	m.Id = 0
	q, _ := m.Pack()
	st.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(q))), q...))
	st.Close()
	time.Sleep(300 * time.Millisecond) // three idle timeouts with a question open
	if c.Context().Err() != nil {
		t.Fatalf("closed with a question open: %v", context.Cause(c.Context()))
	}
	close(slow)
	if b, err := io.ReadAll(st); err != nil || len(b) < 2 {
		t.Fatalf("answer %x, %v", b, err)
	}
	<-c.Context().Done()
	var ae *quic.ApplicationError
	if err := context.Cause(c.Context()); !errors.As(err, &ae) || !ae.Remote || ae.ErrorCode != DoQNoError {
		t.Errorf("closed with %v, want the server's DOQ_NO_ERROR", err)
	}
}

type resolverFunc func(ctx context.Context, query, dst []byte) engine.Response

func (f resolverFunc) ResolveWire(ctx context.Context, query, dst []byte) engine.Response {
	return f(ctx, query, dst)
}
