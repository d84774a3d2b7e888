package proxied

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"fmt"
	"io"
	stdlog "log"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	proxyproto "github.com/pires/go-proxyproto"

	"github.com/dohfwd/dohfwd/doh"
	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/enginetest"
)

// The balancer is 127.0.0.2; plain clients come from 127.0.0.1.
var (
	balancer = netip.MustParseAddr("127.0.0.2")
	trusted  = []netip.Prefix{netip.PrefixFrom(balancer, 32)}
)

// answerResolver answers every question with one A record.
type answerResolver struct{}

func (answerResolver) ResolveMsg(_ context.Context, q *dns.Msg) enginetest.Response {
	m := new(dns.Msg)
	m.SetReply(q)
	rr, _ := dns.NewRR(q.Question[0].Name + " 60 IN A 192.0.2.1")
	m.Answer = append(m.Answer, rr)
	return enginetest.Response{Msg: m, Response: engine.Response{Result: engine.ResultAnswer}}
}

func (r answerResolver) Resolve(ctx context.Context, query, dst []byte) engine.Response {
	return enginetest.ResolveByMsg(r, ctx, query, dst)
}

// fixture is a real DoH handler behind a wrapped loopback listener,
// recording the peer and client address of every exchange.
type fixture struct {
	addr string

	mu       sync.Mutex
	seen     []doh.Exchange
	refusals []string
}

func (f *fixture) exchanges() []doh.Exchange {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]doh.Exchange(nil), f.seen...)
}

func (f *fixture) refused() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.refusals...)
}

func serve(t *testing.T, tlsCert *tls.Certificate) *fixture {
	t.Helper()
	f := &fixture{}
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = raw.Addr().String()
	ln := Listen(raw, Options{Trusted: trusted, HeaderTimeout: 2 * time.Second,
		OnRefuse: func(peer netip.AddrPort, err error) {
			f.mu.Lock()
			f.refusals = append(f.refusals, peer.Addr().String()+" "+err.Error())
			f.mu.Unlock()
		}})
	h := doh.NewHandler(answerResolver{}, doh.Options{Observe: func(x doh.Exchange) {
		f.mu.Lock()
		f.seen = append(f.seen, x)
		f.mu.Unlock()
	}})
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ErrorLog: stdlog.New(io.Discard, "", 0)}
	if tlsCert != nil {
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{*tlsCert}, NextProtos: []string{"h2", "http/1.1"}}
		go func() { _ = srv.ServeTLS(ln, "", "") }()
	} else {
		go func() { _ = srv.Serve(ln) }()
	}
	t.Cleanup(func() { _ = srv.Close() })
	return f
}

// dialFrom connects to addr from the given loopback source address.
func dialFrom(t *testing.T, from netip.Addr, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(from, 0))}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial from %s: %v", from, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func queryPath(t *testing.T) string {
	t.Helper()
	q := new(dns.Msg)
	q.SetQuestion("www.example.", dns.TypeA)
	q.Id = 0
	wire, err := q.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return "/dns-query?dns=" + base64.RawURLEncoding.EncodeToString(wire)
}

// get sends one HTTP/1.1 DoH GET on c and returns the status, or an error
// when the server closed the connection instead.
func get(t *testing.T, c net.Conn) (int, error) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: doh.test\r\nAccept: application/dns-message\r\n\r\n", queryPath(t))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

func lastExchange(t *testing.T, f *fixture) doh.Exchange {
	t.Helper()
	xs := f.exchanges()
	if len(xs) == 0 {
		t.Fatal("the handler saw no exchange")
	}
	return xs[len(xs)-1]
}

func TestProxyV1HeaderGivesTheClientAddress(t *testing.T) {
	f := serve(t, nil)
	c := dialFrom(t, balancer, f.addr)
	fmt.Fprintf(c, "PROXY TCP4 203.0.113.7 127.0.0.1 40001 443\r\n")
	if status, err := get(t, c); err != nil || status != http.StatusOK {
		t.Fatalf("DoH GET after a v1 header: status %d, %v", status, err)
	}
	x := lastExchange(t, f)
	if want := netip.MustParseAddrPort("203.0.113.7:40001"); x.Peer != want || x.ClientIP != want.Addr() {
		t.Errorf("handler saw peer %v client %v, want %v from the header", x.Peer, x.ClientIP, want)
	}
}

func TestProxyV2HeaderOverTLSAndHTTP2GivesTheClientAddress(t *testing.T) {
	cert, roots := testCert(t)
	f := serve(t, cert)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		ForceAttemptHTTP2: true,
		TLSClientConfig:   &tls.Config{RootCAs: roots, ServerName: "localhost"},
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(balancer, 0))}
			c, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			h := &proxyproto.Header{Version: 2, Command: proxyproto.PROXY, TransportProtocol: proxyproto.TCPv6,
				SourceAddr:      &net.TCPAddr{IP: net.ParseIP("2001:db8::53"), Port: 40002},
				DestinationAddr: &net.TCPAddr{IP: net.ParseIP("2001:db8::1"), Port: 443}}
			if _, err := h.WriteTo(c); err != nil {
				c.Close()
				return nil, err
			}
			return c, nil
		},
	}}
	defer client.CloseIdleConnections()
	resp, err := client.Get("https://" + f.addr + queryPath(t))
	if err != nil {
		t.Fatalf("DoH over TLS after a v2 header: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
		t.Fatalf("status %d over %s, want 200 over HTTP/2", resp.StatusCode, resp.Proto)
	}
	x := lastExchange(t, f)
	if want := netip.MustParseAddrPort("[2001:db8::53]:40002"); x.Peer != want || x.ClientIP != want.Addr() {
		t.Errorf("handler saw peer %v client %v, want %v from the header", x.Peer, x.ClientIP, want)
	}
}

func TestProxyHeaderFromUntrustedSourceIsRefused(t *testing.T) {
	f := serve(t, nil)
	c := dialFrom(t, netip.MustParseAddr("127.0.0.1"), f.addr)
	fmt.Fprintf(c, "PROXY TCP4 203.0.113.8 127.0.0.1 40003 443\r\n")
	if status, err := get(t, c); err == nil {
		t.Fatalf("an untrusted peer's header was accepted (status %d)", status)
	}
	if n := len(f.exchanges()); n != 0 {
		t.Errorf("the handler saw %d exchanges from a refused connection", n)
	}
	assertRefused(t, f, "127.0.0.1", "proxy header")
}

func TestMissingProxyHeaderFromTrustedSourceIsRefused(t *testing.T) {
	f := serve(t, nil)
	c := dialFrom(t, balancer, f.addr)
	if status, err := get(t, c); err == nil {
		t.Fatalf("a balancer's connection without a header was served (status %d)", status)
	}
	if n := len(f.exchanges()); n != 0 {
		t.Errorf("the handler saw %d exchanges from a refused connection", n)
	}
	assertRefused(t, f, balancer.String(), "proxy protocol")
}

func TestUntrustedSourceWithoutHeaderIsServedAsItself(t *testing.T) {
	f := serve(t, nil)
	c := dialFrom(t, netip.MustParseAddr("127.0.0.1"), f.addr)
	if status, err := get(t, c); err != nil || status != http.StatusOK {
		t.Fatalf("plain client: status %d, %v", status, err)
	}
	if x := lastExchange(t, f); x.ClientIP != netip.MustParseAddr("127.0.0.1") {
		t.Errorf("client %v, want the TCP peer 127.0.0.1", x.ClientIP)
	}
}

func TestMalformedProxyHeaderClosesOnlyThatConnection(t *testing.T) {
	f := serve(t, nil)
	// A connection already being served, before and after the bad one.
	good := dialFrom(t, balancer, f.addr)
	fmt.Fprintf(good, "PROXY TCP4 203.0.113.9 127.0.0.1 40004 443\r\n")
	if status, err := get(t, good); err != nil || status != http.StatusOK {
		t.Fatalf("good connection: status %d, %v", status, err)
	}

	for _, bad := range []string{
		"PROXY TCP4 not-an-address 127.0.0.1 1 2\r\n",
		"PROXY TCP4 203.0.113.10 127.0.0.1 99999 443\r\n",
		"PROXY TCP4 203.0.113.10 127.0.0.1 1 2\n",
		"\r\n\r\n\x00\r\nQUIT\n\x21\x11\x00\xff", // v2 signature, length past the data
	} {
		c := dialFrom(t, balancer, f.addr)
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, bad)
		if tc, ok := c.(*net.TCPConn); ok && strings.HasPrefix(bad, "\r\n") {
			_ = tc.CloseWrite() // the v2 header will never be complete
		}
		if status, err := get(t, c); err == nil {
			t.Errorf("malformed header %q was served (status %d)", bad, status)
		}
	}
	if n := len(f.refused()); n < 4 {
		t.Errorf("%d refusals reported for 4 malformed headers: %q", n, f.refused())
	}

	// The connection opened before is still served, and new ones are.
	if status, err := get(t, good); err != nil || status != http.StatusOK {
		t.Fatalf("the earlier connection after the malformed ones: status %d, %v", status, err)
	}
	if x := lastExchange(t, f); x.ClientIP != netip.MustParseAddr("203.0.113.9") {
		t.Errorf("client %v, want 203.0.113.9", x.ClientIP)
	}
	fresh := dialFrom(t, balancer, f.addr)
	fmt.Fprintf(fresh, "PROXY TCP4 203.0.113.11 127.0.0.1 40005 443\r\n")
	if status, err := get(t, fresh); err != nil || status != http.StatusOK {
		t.Fatalf("a new connection after the malformed ones: status %d, %v", status, err)
	}
}

func TestNoTrustedPrefixesLeavesTheListenerAlone(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if ln := Listen(raw, Options{}); ln != raw {
		t.Errorf("Listen without trusted prefixes wrapped the listener: %T", ln)
	}
}

func assertRefused(t *testing.T, f *fixture, peer, reason string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		for _, r := range f.refused() {
			if strings.HasPrefix(r, peer+" ") && strings.Contains(strings.ToLower(r), reason) {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("no refusal of %s for %q reported; got %q", peer, reason, f.refused())
}

// testCert is a self-signed certificate for localhost.
func testCert(t *testing.T) (*tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{"localhost"}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, roots
}
