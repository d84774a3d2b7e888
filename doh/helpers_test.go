//go:build !wasip1

package doh

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"io"
	"math/big"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/enginetest"
	"github.com/miekg/dns"
	"golang.org/x/net/http2"
)

// recordingResolver answers every query with one A record and counts the
// calls: the bad-input tests assert it was never asked.
type recordingResolver struct {
	calls atomic.Int64
}

func (r *recordingResolver) ResolveMsg(_ context.Context, q *dns.Msg) enginetest.Response {
	r.calls.Add(1)
	m := new(dns.Msg)
	m.SetReply(q)
	m.RecursionAvailable = true
	rr, _ := dns.NewRR(q.Question[0].Name + " 120 IN A 192.0.2.7")
	m.Answer = append(m.Answer, rr)
	return enginetest.Response{Msg: m, Response: engine.Response{Result: engine.ResultAnswer}}
}

func (r *recordingResolver) Resolve(ctx context.Context, query, dst []byte) engine.Response {
	return enginetest.ResolveByMsg(r, ctx, query, dst)
}

// testCert is a self-signed certificate for 127.0.0.1, made once.
var testCert = sync.OnceValues(func() (tls.Certificate, *x509.CertPool) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "dohfwd test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:              []string{"localhost"},
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:                  true,
		BasicConstraintsValid: true,
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

// startTLS serves h with NewTLSServer on 127.0.0.1 and returns its base
// URL and an HTTP/2-only client that trusts it.
func startTLS(t testing.TB, h http.Handler, l Limits) (string, *http.Client) {
	t.Helper()
	cert, pool := testCert()
	srv, err := NewTLSServer(h, &tls.Config{Certificates: []tls.Certificate{cert}}, l)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	tr := &http2.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	t.Cleanup(tr.CloseIdleConnections)
	return "https://" + ln.Addr().String(), &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

// startPlain serves h with NewPlainServer on 127.0.0.1.
func startPlain(t testing.TB, h http.Handler) string {
	t.Helper()
	srv := NewPlainServer(h, Limits{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// h2cClient speaks HTTP/2 with prior knowledge over plain TCP.
func h2cClient(t testing.TB) *http.Client {
	tr := &http2.Transport{
		AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

// query is a packed query for name and type, with id.
func query(t testing.TB, name string, qtype uint16, id uint16) *dns.Msg {
	t.Helper()
	q := new(dns.Msg)
	q.SetQuestion(name, qtype)
	q.Id = id
	return q
}

func pack(t testing.TB, m *dns.Msg) []byte {
	t.Helper()
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// do sends req and returns the response with its body read.
func do(t testing.TB, c *http.Client, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", req.Method, req.URL, err)
	}
	return resp, body
}

func newRequest(t testing.TB, method, url string, body []byte, header ...string) *http.Request {
	t.Helper()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return req
}

// exchanges collects Observe calls.
type exchanges struct {
	mu   sync.Mutex
	list []Exchange
}

func (e *exchanges) observe(x Exchange) {
	e.mu.Lock()
	e.list = append(e.list, x)
	e.mu.Unlock()
}

func (e *exchanges) last(t testing.TB) Exchange {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.list) == 0 {
		t.Fatal("Observe was not called")
	}
	return e.list[len(e.list)-1]
}

// doInBackground sends req on c and reports the client's error once Do
// returns (nil for a response, whose body it closes).
func doInBackground(c *http.Client, req *http.Request) <-chan error {
	errc := make(chan error, 1)
	go func() {
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	return errc
}
