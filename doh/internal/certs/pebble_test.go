package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/scripts/testtool"
)

// pebbleVersion is the Pebble that scripts/setup.d/30-pebble.sh installs.
const pebbleVersion = "v2.10.3"

// shortProfile is a Pebble certificate profile with a lifetime short enough
// for a renewal to happen within a test.
const (
	shortProfile  = "short"
	shortValidity = 30 // seconds
)

// pebble is a running Let's Encrypt test CA on loopback.
type pebble struct {
	dirURL   string // ACME directory, through the order-counting proxy
	caRoot   string // PEM file with the root of Pebble's own HTTPS API (tls.acme.ca_root)
	mgmtURL  string
	httpPort int // where Pebble validates HTTP-01
	orders   atomic.Int64
	// orderHook, when set, runs before an order is passed to Pebble with
	// the order's number (1 for the first); it may hold the order back.
	orderHook atomic.Pointer[func(n int64, r *http.Request)]
	output    *logBuffer
}

// findPebble locates the pebble binary on PATH or in GOBIN/GOPATH/bin;
// missing, it fails the test under CI (testtool.Find).
func findPebble(t *testing.T) string {
	t.Helper()
	return testtool.Find(t, "pebble", "scripts/setup.d/30-pebble.sh: go install github.com/letsencrypt/pebble/v2/cmd/pebble@"+pebbleVersion)
}

// freePort reserves a loopback TCP port number. Pebble's own listeners need
// port numbers in its config; the small window before it binds is accepted.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startTestDNS answers A 127.0.0.1 for every name and nothing else, so
// Pebble's validator reaches the test's listeners on loopback over IPv4
// only. It serves UDP and TCP on one port (Pebble's resolver uses both) and
// returns the address.
func startTestDNS(t *testing.T) string {
	t.Helper()
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		r := new(dns.Msg)
		r.SetReply(q)
		r.Authoritative = true
		if len(q.Question) == 1 && q.Question[0].Qtype == dns.TypeA {
			r.Answer = append(r.Answer, &dns.A{
				Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 1},
				A:   net.IPv4(127, 0, 0, 1),
			})
		}
		_ = w.WriteMsg(r)
	})
	var pc net.PacketConn
	var ln net.Listener
	for try := 0; ln == nil; try++ {
		var err error
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		if ln, err = net.Listen("tcp", pc.LocalAddr().String()); err != nil {
			pc.Close()
			if try == 20 {
				t.Fatalf("no port free for both UDP and TCP: %v", err)
			}
		}
	}
	for _, srv := range []*dns.Server{{PacketConn: pc, Handler: handler}, {Listener: ln, Handler: handler}} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go func() { _ = srv.ActivateAndServe() }()
		<-started
		t.Cleanup(func() { _ = srv.Shutdown() })
	}
	return pc.LocalAddr().String()
}

// testCA is a CA made for one test, used for Pebble's own HTTPS API.
type testCA struct {
	certPEM []byte
	leaf    tls.Certificate // for 127.0.0.1 and localhost
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "dohfwd test API CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		leaf:    tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key},
	}
}

// startPebble runs Pebble on loopback with its validator's TLS-ALPN-01
// connections sent to tlsPort (where the test serves the Manager's
// TLSConfig) and its DNS lookups sent to a test DNS server.
func startPebble(t *testing.T, tlsPort int) *pebble {
	t.Helper()
	bin := findPebble(t)
	dir := t.TempDir()
	ca := newTestCA(t)
	certPEM, keyPEM := pemPair(t, &ca.leaf)
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := &pebble{caRoot: write("api-ca.pem", ca.certPEM), httpPort: freePort(t), output: &logBuffer{}}
	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	mgmt := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	p.mgmtURL = "https://" + mgmt
	config := map[string]any{"pebble": map[string]any{
		"listenAddress":           listen,
		"managementListenAddress": mgmt,
		"certificate":             write("api.pem", certPEM),
		"privateKey":              write("api.key", keyPEM),
		"httpPort":                p.httpPort,
		"tlsPort":                 tlsPort,
		"ocspResponderURL":        "",
		"retryAfter":              map[string]int{"authz": 1, "order": 1},
		"keyAlgorithm":            "ecdsa",
		"profiles": map[string]any{
			"default":    map[string]any{"description": "90 days", "validityPeriod": 7776000},
			shortProfile: map[string]any{"description": "short, for renewal tests", "validityPeriod": shortValidity},
		},
	}}
	cfgJSON, _ := json.Marshal(config)
	cmd := exec.Command(bin, "-config", write("pebble.json", cfgJSON), "-dnsserver", startTestDNS(t))
	cmd.Env = append(os.Environ(), "PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0", "PEBBLE_AUTHZREUSE=0")
	cmd.Stdout, cmd.Stderr = p.output, p.output
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting pebble: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("pebble output:\n%s", p.output)
		}
	})

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.certPEM)
	apiTransport := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}
	t.Cleanup(apiTransport.CloseIdleConnections)
	client := &http.Client{Transport: apiTransport, Timeout: 2 * time.Second}
	eventually(t, 45*time.Second, "pebble to serve its directory", func() bool {
		resp, err := client.Get("https://" + listen + "/dir")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	// A reverse proxy in front of the ACME API counts new orders. Pebble
	// builds its URLs from the Host header, so clients stay on the proxy.
	target, _ := url.Parse("https://" + listen)
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = apiTransport
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{ca.leaf}})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/order-plz" {
			n := p.orders.Add(1)
			if hook := p.orderHook.Load(); hook != nil {
				(*hook)(n, r)
			}
		}
		proxy.ServeHTTP(w, r)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	p.dirURL = "https://" + ln.Addr().String() + "/dir"
	return p
}

// issuingRoots fetches the root Pebble signs with from its management
// interface (a new one on every run).
func (p *pebble) issuingRoots(t *testing.T) (*x509.CertPool, []byte) {
	t.Helper()
	apiRoots := x509.NewCertPool()
	pemBytes, err := os.ReadFile(p.caRoot)
	if err != nil {
		t.Fatal(err)
	}
	apiRoots.AppendCertsFromPEM(pemBytes)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: apiRoots}}, Timeout: 5 * time.Second}
	resp, err := client.Get(p.mgmtURL + "/roots/0")
	if err != nil {
		t.Fatalf("fetching pebble's root: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("fetching pebble's root: status %d, %v", resp.StatusCode, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(body) {
		t.Fatalf("pebble's /roots/0 is not PEM: %q", body)
	}
	return pool, body
}

// acmeConfig is the Manager configuration for this Pebble.
func (p *pebble) acmeConfig(t *testing.T, domain, storage string) Config {
	cfg := Config{Mode: ModeACME, ACME: ACMEConfig{
		Domains: []string{domain},
		Email:   "ops@doh.test",
		CA:      p.dirURL,
		CARoot:  p.caRoot,
		Storage: storage,
		// Pebble picks a random profile for orders that name none.
		Profile: "default",
	}}
	return cfg
}
