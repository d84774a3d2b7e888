package main

import (
	"bufio"
	"bytes"
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
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/doh/config"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"

	"github.com/dohfwd/dohfwd/scripts/testtool"
)

// The end-to-end tests run the real binary, built once by TestMain, on
// loopback with random ports, against nsd (the happy path) and
// engine/upstreamtest (faults).

var binary string // the dohfwd binary under test

const testVersion = "e2e-test-version"

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "dohfwd-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "dohfwd")
	build := exec.Command("go", "build", "-ldflags", "-X main.version="+testVersion, "-o", binary, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building dohfwd:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// needTool finds a tool the test uses; a missing one fails the test under
// CI and skips it loudly elsewhere (testtool.Find): make test's setup
// installs them.
func needTool(t *testing.T, name string) string {
	t.Helper()
	return testtool.Find(t, name, "scripts/setup.sh installs it; make test runs it")
}

// testZone is what nsd serves: names only this upstream knows.
const testZone = `$ORIGIN e2e.test.
$TTL 300
@ IN SOA ns.e2e.test. admin.e2e.test. 1 3600 600 86400 120
@ IN NS ns
ns IN A 127.0.0.1
www 3600 IN A 127.0.0.1
ttl 45 IN A 192.0.2.45
ttl 90 IN A 192.0.2.46
v6 IN AAAA 2001:db8::1
`

// exampleZone serves the name of the README's examples.
const exampleZone = `$ORIGIN example.com.
$TTL 300
@ IN SOA ns.example.com. admin.example.com. 1 3600 600 86400 300
@ IN NS ns
@ IN A 192.0.2.10
ns IN A 127.0.0.1
www IN A 192.0.2.10
www IN AAAA 2001:db8::10
`

// startNSD runs nsd for e2e.test. and example.com. until the test ends.
// Unlike the unit tests' nsd, a missing nsd fails: make test installs it.
func startNSD(t *testing.T) string {
	t.Helper()
	needTool(t, "nsd")
	return upstreamtest.StartNSD(t,
		upstreamtest.Zone{Origin: "e2e.test.", Text: testZone},
		upstreamtest.Zone{Origin: "example.com.", Text: exampleZone})
}

// freePort finds a port free for both UDP and TCP on 127.0.0.1.
func freePort(t *testing.T) int { return upstreamtest.FreePort(t) }

// testPKI is a private CA and a server certificate for 127.0.0.1, ::1 and
// localhost, so clients verify the server for real.
type testPKI struct {
	CA, Cert, Key string // PEM files
	Pool          *x509.CertPool
}

func newPKI(t *testing.T) *testPKI {
	t.Helper()
	dir := t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "dohfwd e2e test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalPKCS8PrivateKey(key)
	p := &testPKI{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "cert.pem"), Key: filepath.Join(dir, "key.pem"),
		Pool: x509.NewCertPool()}
	p.Pool.AddCert(caCert)
	os.WriteFile(p.CA, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644)
	os.WriteFile(p.Cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	os.WriteFile(p.Key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600)
	return p
}

// dohfwd is one running dohfwd process.
type dohfwd struct {
	t      *testing.T
	cmd    *exec.Cmd
	config string // the configuration file
	HTTPS  string // host:port of each listener, "" when off
	HTTP   string
	Admin  string
	pki    *testPKI

	mu     sync.Mutex
	lines  []string // stderr, line by line
	grow   *sync.Cond
	exited chan struct{}
	err    error // the process's exit, once exited is closed
}

// startDohfwd writes yaml (with listeners on port 0 unless set) and runs
// `dohfwd serve --config` on it until the test ends. With pki, TLS comes
// from its files.
func startDohfwd(t *testing.T, yaml string, pki *testPKI) *dohfwd {
	t.Helper()
	return startCommand(t, yaml, pki, 10*time.Second, func(config string) *exec.Cmd {
		return exec.Command(binary, "serve", "--config", config)
	})
}

// startCommand is startDohfwd for the command command(config file) runs:
// dohfwd serve, or another host of the same configuration (dohfwd-edge,
// which may first compile its module: within bounds the wait for each
// listener).
func startCommand(t *testing.T, yaml string, pki *testPKI, within time.Duration, command func(config string) *exec.Cmd) *dohfwd {
	t.Helper()
	if pki != nil {
		yaml += fmt.Sprintf("tls:\n  mode: files\n  cert_file: %s\n  key_file: %s\n", pki.Cert, pki.Key)
	}
	path := filepath.Join(t.TempDir(), "dohfwd.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	d := &dohfwd{t: t, config: path, pki: pki, exited: make(chan struct{})}
	d.grow = sync.NewCond(&d.mu)
	d.cmd = command(path)
	stderr, err := d.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			d.mu.Lock()
			d.lines = append(d.lines, sc.Text())
			d.grow.Broadcast()
			d.mu.Unlock()
		}
		err := d.cmd.Wait()
		d.mu.Lock()
		d.err = err
		close(d.exited)
		d.grow.Broadcast()
		d.mu.Unlock()
	}()
	t.Cleanup(func() {
		d.cmd.Process.Kill()
		<-d.exited
		if t.Failed() {
			t.Logf("dohfwd stderr:\n%s", strings.Join(d.Lines(), "\n"))
		}
	})
	cfg, err := config.Parse(path, []byte(yaml))
	if err != nil {
		t.Fatalf("test configuration: %v", err)
	}
	for name, on := range map[string]bool{"https": cfg.Listen.HTTPS != "", "http": cfg.Listen.HTTP != "", "admin": cfg.Listen.Admin != ""} {
		if on {
			ev := d.waitEvent(within, func(ev map[string]any) bool {
				return ev["message"] == "listening" && ev["listener"] == name
			})
			addr := ev["addr"].(string)
			switch name {
			case "https":
				d.HTTPS = addr
			case "http":
				d.HTTP = addr
			case "admin":
				d.Admin = addr
			}
		}
	}
	return d
}

// Lines returns stderr so far.
func (d *dohfwd) Lines() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.lines...)
}

// Events returns the JSON log events so far that match.
func (d *dohfwd) Events(match func(map[string]any) bool) []map[string]any {
	var out []map[string]any
	for _, l := range d.Lines() {
		var ev map[string]any
		if json.Unmarshal([]byte(l), &ev) == nil && match(ev) {
			out = append(out, ev)
		}
	}
	return out
}

// waitEvent waits for a JSON log event that matches; it fails the test on
// timeout or exit.
func (d *dohfwd) waitEvent(within time.Duration, match func(map[string]any) bool) map[string]any {
	d.t.Helper()
	deadline := time.Now().Add(within)
	timer := time.AfterFunc(within, func() { d.mu.Lock(); d.grow.Broadcast(); d.mu.Unlock() })
	defer timer.Stop()
	d.mu.Lock()
	defer d.mu.Unlock()
	seen := 0
	for {
		for ; seen < len(d.lines); seen++ {
			var ev map[string]any
			if json.Unmarshal([]byte(d.lines[seen]), &ev) == nil && match(ev) {
				return ev
			}
		}
		select {
		case <-d.exited:
			d.t.Fatalf("dohfwd exited (%v) before the event; stderr:\n%s", d.err, strings.Join(d.lines, "\n"))
		default:
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("no such event within %v; stderr:\n%s", within, strings.Join(d.lines, "\n"))
		}
		d.grow.Wait()
	}
}

// wait waits for the process to exit and returns its exit code.
func (d *dohfwd) wait(within time.Duration) int {
	d.t.Helper()
	select {
	case <-d.exited:
	case <-time.After(within):
		d.t.Fatalf("dohfwd did not exit within %v", within)
	}
	if d.err == nil {
		return 0
	}
	if ee, ok := d.err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	d.t.Fatalf("dohfwd: %v", d.err)
	return -1
}

// URL is the DoH URL of the HTTPS listener.
func (d *dohfwd) URL() string { return "https://" + d.HTTPS + "/dns-query" }

// client is an HTTP/2 client that trusts the test CA.
func (d *dohfwd) client() *http.Client {
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: d.pki.Pool}, ForceAttemptHTTP2: true}
	d.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 15 * time.Second}
}

// query is a DoH POST of q; it returns the HTTP response and the parsed
// answer (nil when the body is not a DNS message).
func (d *dohfwd) query(c *http.Client, q *dns.Msg) (*http.Response, *dns.Msg) {
	d.t.Helper()
	wire, err := q.Pack()
	if err != nil {
		d.t.Fatal(err)
	}
	res, err := c.Post(d.URL(), "application/dns-message", bytes.NewReader(wire))
	if err != nil {
		d.t.Fatalf("POST %s: %v", d.URL(), err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	m := new(dns.Msg)
	if m.Unpack(body) != nil {
		m = nil
	}
	return res, m
}

// status fetches /status from the admin listener.
func (d *dohfwd) status() map[string]any {
	d.t.Helper()
	res, err := http.Get("http://" + d.Admin + "/status")
	if err != nil {
		d.t.Fatal(err)
	}
	defer res.Body.Close()
	var st map[string]any
	if err := json.NewDecoder(res.Body).Decode(&st); err != nil {
		d.t.Fatal(err)
	}
	return st
}

func newQuery(name string, qtype uint16) *dns.Msg {
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), qtype)
	return q
}

// scopeYAML is a configuration with one default-route scope on servers,
// the fallback servers pointed nowhere useful, and listeners on port 0.
func scopeYAML(servers ...string) string {
	return fmt.Sprintf(`listen:
  https: 127.0.0.1:0
  admin: 127.0.0.1:0
scopes:
  - name: test
    default_route: true
    servers: [%s]
fallback_servers: [127.0.0.1:1]
log:
  format: json
`, strings.Join(servers, ", "))
}

// runTool runs a client tool and returns its stdout; it fails the test with
// the tool's output when it exits non-zero.
func runTool(t *testing.T, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(needTool(t, name), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	done := make(chan error, 1)
	cmd.Start()
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", name, strings.Join(args, " "), err, out.Bytes(), errb.Bytes())
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("%s %s: timed out", name, strings.Join(args, " "))
	}
	return out.String()
}
