package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/rs/zerolog"

	"github.com/dohfwd/dohfwd/scripts/testtool"
)

const obtainTimeout = 30 * time.Second

// listenLoopback binds a loopback TCP port for an HTTPS listener.
func listenLoopback(t *testing.T) (net.Listener, int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln, ln.Addr().(*net.TCPAddr).Port
}

func waitReady(t *testing.T, m *Manager) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), obtainTimeout)
	defer cancel()
	if err := m.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
}

// startManager runs a Manager for cfg serving DoH over TLS on ln until
// the test ends, and returns it with ln's address once its certificate is
// ready.
func startManager(t *testing.T, cfg Config, log zerolog.Logger, ln net.Listener) (*Manager, string) {
	t.Helper()
	m, err := New(context.Background(), cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	mustClose(t, m)
	addr := serveTLSOn(t, m, ln)
	waitReady(t, m)
	return m, addr
}

// dohGet does a DoH GET for name over HTTP/2 to addr, presenting domain
// as the server name and verifying the chain against roots, and returns
// the answer and the leaf certificate served.
func dohGet(t *testing.T, addr, domain, name string, roots *x509.CertPool) (*dns.Msg, *x509.Certificate) {
	t.Helper()
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: roots, ServerName: domain},
		ForceAttemptHTTP2: true,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodGet, dohQueryURL(t, domain, name), nil)
	req.Header.Set("Accept", "application/dns-message")
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("DoH GET to %s as %s: %v", addr, domain, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
		t.Fatalf("DoH GET: %s %s, want 200 over HTTP/2", resp.Proto, resp.Status)
	}
	answer := new(dns.Msg)
	if err := answer.Unpack(body); err != nil {
		t.Fatalf("DoH answer does not parse: %v", err)
	}
	return answer, resp.TLS.PeerCertificates[0]
}

func TestACMEObtainsViaTLSALPN01OnTheDoHListener(t *testing.T) {
	t.Parallel()
	ln, tlsPort := listenLoopback(t)
	ca := startPebble(t, tlsPort)
	const domain = "alpn.doh.test"

	log, logs := testLogger(t)
	cfg := ca.acmeConfig(t, domain, t.TempDir())
	cfg.ACME.TLSALPNListen = ln.Addr().String()
	m, err := New(context.Background(), cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	mustClose(t, m)
	if got := m.TLSConfig().NextProtos; !strings.Contains(strings.Join(got, ","), "acme-tls/1") {
		t.Errorf("NextProtos = %v, want acme-tls/1 among them", got)
	}
	addr := serveTLSOn(t, m, ln) // the DoH listener is the TLS-ALPN-01 responder
	waitReady(t, m)

	roots, rootPEM := ca.issuingRoots(t)
	answer, leaf := dohGet(t, addr, domain, "www.example.", roots)
	if len(answer.Answer) != 1 {
		t.Errorf("DoH answer = %v, want one A record", answer)
	}
	if got, want := leaf.DNSNames, []string{domain}; len(got) != 1 || got[0] != want[0] {
		t.Errorf("certificate names = %v, want %v", got, want)
	}
	if m.Fingerprint() != fingerprint(leaf.Raw) {
		t.Errorf("Fingerprint() = %s, served %s", m.Fingerprint(), fingerprint(leaf.Raw))
	}
	if n := ca.orders.Load(); n != 1 {
		t.Errorf("Pebble saw %d orders, want 1", n)
	}

	// A real DoH client (curl, OpenSSL's verifier) trusts the chain too.
	curlDoH(t, addr, domain, rootPEM)

	out := logs.String()
	for _, want := range []string{
		"waiting for a certificate from the ACME CA", // ours, at start
		"certificate obtained successfully",          // certmagic's zap line, bridged
		"certificate ready",                          // ours
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log stream lacks %q", want)
		}
	}
	assertChallengeSolved(t, out, "tls-alpn-01", "http-01")
}

// assertChallengeSolved checks in the bridged acmez logs that challenges
// were solved with the used type and never tried with the unused one.
func assertChallengeSolved(t *testing.T, logs, used, unused string) {
	t.Helper()
	tried := linesWith(logs, "trying to solve challenge")
	if !strings.Contains(tried, `"challenge_type":"`+used+`"`) {
		t.Errorf("no %s challenge was tried; challenge log lines:\n%s", used, tried)
	}
	if strings.Contains(tried, `"challenge_type":"`+unused+`"`) {
		t.Errorf("%s was tried although it is not configured:\n%s", unused, tried)
	}
}

// curlDoH runs curl against the server: a DoH-URL lookup is what browsers
// do; here a GET of the RFC 8484 URL with the chain checked by curl.
func curlDoH(t *testing.T, addr, domain string, rootPEM []byte) {
	t.Helper()
	curl := testtool.Find(t, "curl", "scripts/setup.d/05-base.sh installs it")
	root := filepath.Join(t.TempDir(), "pebble-root.pem")
	if err := os.WriteFile(root, rootPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(curl, "--silent", "--show-error", "--http2", "--cacert", root,
		"--resolve", domain+":"+port+":127.0.0.1", "-H", "accept: application/dns-message",
		"-o", "/dev/null", "-w", "%{http_code} %{http_version}",
		dohQueryURL(t, net.JoinHostPort(domain, port), "www.example."))
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "200 2" {
		t.Fatalf("curl DoH GET verifying against Pebble's root: %q, %v", out, err)
	}
}

// linesWith returns the lines of text that contain sub.
func linesWith(text, sub string) string {
	var b strings.Builder
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, sub) {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

func TestACMEObtainsViaHTTP01(t *testing.T) {
	t.Parallel()
	ca := startPebble(t, freePort(t)) // nothing answers there: TLS-ALPN-01 could not pass
	const domain = "http.doh.test"

	log, logs := testLogger(t)
	cfg := ca.acmeConfig(t, domain, t.TempDir())
	httpListen := net.JoinHostPort("127.0.0.1", strconv.Itoa(ca.httpPort))
	cfg.ACME.HTTPListen = httpListen
	cfg.ACME.DisableTLSALPN = true
	ln, _ := listenLoopback(t)
	cfg.ACME.TLSALPNListen = ln.Addr().String()
	m, addr := startManager(t, cfg, log, ln)

	roots, _ := ca.issuingRoots(t)
	_, leaf := dohGet(t, addr, domain, "www.example.", roots)
	if m.Fingerprint() != fingerprint(leaf.Raw) {
		t.Errorf("Fingerprint() = %s, served %s", m.Fingerprint(), fingerprint(leaf.Raw))
	}
	assertChallengeSolved(t, logs.String(), "http-01", "tls-alpn-01")

	// The HTTP-01 listener serves nothing else.
	resp, err := http.Get("http://" + httpListen + "/dns-query")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("plain HTTP GET /dns-query on the challenge listener: %s, want 404", resp.Status)
	}
}

func TestACMERenewsInBackgroundWithoutRestart(t *testing.T) {
	t.Parallel()
	ln, tlsPort := listenLoopback(t)
	ca := startPebble(t, tlsPort)
	const domain = "renew.doh.test"

	log, logs := testLogger(t)
	cfg := ca.acmeConfig(t, domain, t.TempDir())
	cfg.ACME.TLSALPNListen = ln.Addr().String()
	cfg.ACME.Profile = shortProfile // 30 s certificates
	// Renew once 10% of the lifetime has passed, checking twice a second.
	cfg.tuning.renewalWindowRatio = 0.9
	cfg.tuning.renewCheckInterval = 500 * time.Millisecond
	m, addr := startManager(t, cfg, log, ln)

	roots, _ := ca.issuingRoots(t)
	_, first := dohGet(t, addr, domain, "www.example.", roots)
	if life := first.NotAfter.Sub(first.NotBefore); life > time.Minute {
		t.Fatalf("certificate lifetime %v: the short profile was not used", life)
	}
	var renewed *x509.Certificate
	eventually(t, 30*time.Second, "the served certificate to be renewed", func() bool {
		_, leaf := dohGet(t, addr, domain, "www.example.", roots)
		if leaf.SerialNumber.Cmp(first.SerialNumber) != 0 {
			renewed = leaf
			return true
		}
		return false
	})
	if !renewed.NotAfter.After(first.NotAfter) {
		t.Errorf("renewed certificate expires %v, not after the first one's %v", renewed.NotAfter, first.NotAfter)
	}
	if m.Fingerprint() == fingerprint(first.Raw) {
		t.Error("Fingerprint() still reports the first certificate")
	}
	if n := ca.orders.Load(); n < 2 {
		t.Errorf("Pebble saw %d orders, want a second one for the renewal", n)
	}
	if !strings.Contains(logs.String(), "certificate renewed successfully") {
		t.Errorf("log stream lacks certmagic's renewal line")
	}
}
