package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"io"
	stdlog "log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/rs/zerolog"

	"github.com/dohfwd/dohfwd/scripts/testtool/syncbuf"
)

// logBuffer collects a Manager's log lines for assertions.
type logBuffer = syncbuf.Buffer

// testLogger writes JSON lines to the returned buffer and, with -v, to the test log.
func testLogger(t *testing.T) (zerolog.Logger, *logBuffer) {
	t.Helper()
	buf := &logBuffer{}
	tw := &testWriter{t: t}
	t.Cleanup(tw.stop)
	w := zerolog.MultiLevelWriter(buf, zerolog.ConsoleWriter{Out: tw, NoColor: true})
	return zerolog.New(w).With().Timestamp().Logger(), buf
}

// testWriter writes log lines to t's log until t's cleanup: certmagic's
// background goroutines may log after the test is over, and t.Log then
// races the test's end.
type testWriter struct {
	t       *testing.T
	mu      sync.Mutex
	stopped bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func (w *testWriter) stop() {
	w.mu.Lock()
	w.stopped = true
	w.mu.Unlock()
}

// serveTLS runs a real HTTPS server on a loopback port with the Manager's
// TLSConfig and returns its address.
func serveTLS(t *testing.T, m *Manager) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serveTLSOn(t, m, ln)
}

func serveTLSOn(t *testing.T, m *Manager, ln net.Listener) string {
	t.Helper()
	srv := newTestHTTPSServer(m)
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// newTestHTTPSServer is an HTTPS server with the Manager's TLSConfig and a
// DoH-like handler, as dohfwd's front end would run it.
func newTestHTTPSServer(m *Manager) *http.Server {
	return &http.Server{
		Handler:           dohLikeHandler(),
		TLSConfig:         m.TLSConfig(),
		ReadHeaderTimeout: 5 * time.Second,
		// Validators and probes hang up after the handshake; not news.
		ErrorLog: stdlog.New(io.Discard, "", 0),
	}
}

// handshakeLeaf does a real TLS handshake with addr and returns the leaf the
// server presented. With roots nil the chain is not verified.
func handshakeLeaf(t *testing.T, addr, serverName string, roots *x509.CertPool) (*x509.Certificate, error) {
	t.Helper()
	cfg := &tls.Config{ServerName: serverName, RootCAs: roots, InsecureSkipVerify: roots == nil}
	d := &net.Dialer{Timeout: 5 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0], nil
}

// eventually polls cond every 20 ms until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pemPair encodes a certificate and its key as PEM.
func pemPair(t *testing.T, c *tls.Certificate) (certPEM, keyPEM []byte) {
	t.Helper()
	for _, der := range c.Certificate {
		certPEM = append(certPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	der, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	return certPEM, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

// writeAtomically replaces path the way deploy tools do: temp file + rename.
func writeAtomically(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func newTestCert(t *testing.T, hosts ...string) *tls.Certificate {
	t.Helper()
	c, err := selfSigned(hosts, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mustClose(t *testing.T, m *Manager) {
	t.Helper()
	t.Cleanup(func() {
		if err := m.Close(); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("Close: %v", err)
		}
	})
}

// dohLikeHandler answers RFC 8484 GET /dns-query?dns=... with a fixed A
// record, enough for a real DoH client to complete a lookup over the
// certificate under test.
func dohLikeHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /dns-query", func(w http.ResponseWriter, r *http.Request) {
		wire, err := base64.RawURLEncoding.DecodeString(r.URL.Query().Get("dns"))
		q := new(dns.Msg)
		if err != nil || q.Unpack(wire) != nil || len(q.Question) != 1 {
			http.Error(w, "bad dns parameter", http.StatusBadRequest)
			return
		}
		reply := new(dns.Msg)
		reply.SetReply(q)
		if q.Question[0].Qtype == dns.TypeA {
			reply.Answer = append(reply.Answer, &dns.A{
				Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60},
				A:   net.IPv4(192, 0, 2, 1),
			})
		}
		out, err := reply.Pack()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/dns-message")
		_, _ = w.Write(out)
	})
	return mux
}

// dohQueryURL is a GET URL asking for name's A record.
func dohQueryURL(t *testing.T, hostPort, name string) string {
	t.Helper()
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), dns.TypeA)
	q.Id = 0
	wire, err := q.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return "https://" + hostPort + "/dns-query?dns=" + base64.RawURLEncoding.EncodeToString(wire)
}
