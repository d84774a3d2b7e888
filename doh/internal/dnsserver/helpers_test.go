package dnsserver

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"io"
	"math/big"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/enginetest"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
)

// testCert is a self-signed certificate for 127.0.0.1 and localhost.
var testCert = sync.OnceValues(func() (tls.Certificate, *x509.CertPool) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "dnsserver test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		panic(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
})

// fixedResolver answers every query with one A record and counts calls.
type fixedResolver struct{ calls atomic.Int64 }

func (r *fixedResolver) ResolveMsg(_ context.Context, q *dns.Msg) enginetest.Response {
	r.calls.Add(1)
	m := new(dns.Msg)
	m.SetReply(q)
	m.RecursionAvailable = true
	rr, _ := dns.NewRR(q.Question[0].Name + " 120 IN A 192.0.2.7")
	m.Answer = append(m.Answer, rr)
	return enginetest.Response{Msg: m, Response: engine.Response{Result: engine.ResultAnswer}}
}

func (r *fixedResolver) Resolve(ctx context.Context, query, dst []byte) engine.Response {
	return enginetest.ResolveByMsg(r, ctx, query, dst)
}

// newEngine is a real engine forwarding to the programmable upstream h.
func newEngine(t *testing.T, h upstreamtest.Handler) *engine.Engine {
	t.Helper()
	up := upstreamtest.Start(t, h)
	e, err := engine.New(engine.Config{FallbackServers: []string{up.String()}}, engine.Options{Network: engine.NativeNetwork{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// startDoT serves r over DoT on 127.0.0.1 until the test ends.
func startDoT(t *testing.T, r Resolver, l Limits) (*Server, string) {
	t.Helper()
	cert, _ := testCert()
	s := &Server{Resolver: r, Limits: l, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
	return s, serveStream(t, s)
}

// startTCP serves r over plain TCP on 127.0.0.1 until the test ends.
func startTCP(t *testing.T, r Resolver, l Limits) (*Server, string) {
	t.Helper()
	s := &Server{Resolver: r, Limits: l}
	return s, serveStream(t, s)
}

func serveStream(t *testing.T, s *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); s.ServeStream(ln) }()
	t.Cleanup(func() { s.Close(); <-done })
	return ln.Addr().String()
}

// dialDoT opens a DoT connection that verifies the server's certificate.
func dialDoT(t *testing.T, addr string) net.Conn {
	t.Helper()
	_, pool := testCert()
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "localhost", NextProtos: []string{"dot"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func dialTCP(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func newQuery(name string, qtype uint16, id uint16) *dns.Msg {
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), qtype)
	q.Id = id
	return q
}

// frame is q packed with its two-byte length.
func frame(t *testing.T, q *dns.Msg) []byte {
	t.Helper()
	wire, err := q.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return append(binary.BigEndian.AppendUint16(nil, uint16(len(wire))), wire...)
}

// readAnswer reads one framed message within 10 s.
func readAnswer(t *testing.T, c net.Conn) *dns.Msg {
	t.Helper()
	m, err := tryReadAnswer(c, 10*time.Second)
	if err != nil {
		t.Fatalf("reading an answer: %v", err)
	}
	return m
}

// readRaw reads one framed message's bytes within 10 s.
func readRaw(t *testing.T, c net.Conn) []byte {
	t.Helper()
	b, err := tryReadRaw(c, 10*time.Second)
	if err != nil {
		t.Fatalf("reading an answer: %v", err)
	}
	return b
}

func tryReadRaw(c net.Conn, within time.Duration) ([]byte, error) {
	c.SetReadDeadline(time.Now().Add(within))
	var n [2]byte
	if _, err := io.ReadFull(c, n[:]); err != nil {
		return nil, err
	}
	b := make([]byte, binary.BigEndian.Uint16(n[:]))
	_, err := io.ReadFull(c, b)
	return b, err
}

func tryReadAnswer(c net.Conn, within time.Duration) (*dns.Msg, error) {
	b, err := tryReadRaw(c, within)
	if err != nil {
		return nil, err
	}
	m := new(dns.Msg)
	return m, m.Unpack(b)
}

// closedByServer reports whether the server hung up c within d.
func closedByServer(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := c.Read(make([]byte, 1))
	if err == nil {
		return false
	}
	ne, ok := err.(net.Error)
	return !ok || !ne.Timeout()
}
