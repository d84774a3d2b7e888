package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/engine/upstreamtest"

	"github.com/dohfwd/dohfwd/scripts/testtool"
)

// findPebbleBinary locates Pebble (scripts/setup.d/30-pebble.sh installs
// it into GOBIN); missing, the test fails under CI (testtool.Find).
func findPebbleBinary(t *testing.T) string {
	t.Helper()
	return testtool.Find(t, "pebble", "scripts/setup.d/30-pebble.sh installs it")
}

// DoT serves the certificate obtained from an ACME CA (Let's Encrypt's
// Pebble, TLS-ALPN-01 on the HTTPS listener): a TLS client and dig +tls
// verify it against the CA's root, and a client that sends no server name
// gets it too.
func TestDoTWithACMECertificate(t *testing.T) {
	t.Parallel()
	pebbleBin := findPebbleBinary(t)
	const name = "dot.acme.test"
	// Pebble resolves the name through this server: A 127.0.0.1, no AAAA.
	resolver := upstreamtest.Start(t, func(q upstreamtest.Query) upstreamtest.Action {
		if q.Msg == nil {
			return upstreamtest.Action{}
		}
		if q.Msg.Question[0].Qtype == dns.TypeA {
			return upstreamtest.Action{Replies: []upstreamtest.Reply{{Msg: upstreamtest.ReplyTo(q.Msg, dns.RcodeSuccess, "@ 1 IN A 127.0.0.1")}}}
		}
		return upstreamtest.Action{Replies: []upstreamtest.Reply{{Msg: upstreamtest.ReplyTo(q.Msg, dns.RcodeSuccess)}}}
	})

	dir := t.TempDir()
	api := newPKI(t) // Pebble's own HTTPS API
	httpsPort, listenPort, mgmtPort := freePort(t), freePort(t), freePort(t)
	cfg, _ := json.Marshal(map[string]any{"pebble": map[string]any{
		"listenAddress":           fmt.Sprintf("127.0.0.1:%d", listenPort),
		"managementListenAddress": fmt.Sprintf("127.0.0.1:%d", mgmtPort),
		"certificate":             api.Cert, "privateKey": api.Key,
		"httpPort": freePort(t), "tlsPort": httpsPort,
		"ocspResponderURL": "", "keyAlgorithm": "ecdsa",
	}})
	cfgFile := filepath.Join(dir, "pebble.json")
	os.WriteFile(cfgFile, cfg, 0o600)
	pebble := exec.Command(pebbleBin, "-config", cfgFile, "-dnsserver", resolver.String())
	pebble.Env = append(os.Environ(), "PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0")
	var pebbleOut strings.Builder
	pebble.Stdout, pebble.Stderr = &pebbleOut, &pebbleOut
	if err := pebble.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pebble.Process.Kill()
		pebble.Wait()
		if t.Failed() {
			t.Logf("pebble:\n%s", pebbleOut.String())
		}
	})
	apiClient := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: api.Pool}}, Timeout: 2 * time.Second}
	for end := time.Now().Add(15 * time.Second); ; {
		res, err := apiClient.Get(fmt.Sprintf("https://127.0.0.1:%d/dir", listenPort))
		if err == nil {
			res.Body.Close()
			break
		}
		if time.Now().After(end) {
			t.Fatalf("pebble does not answer: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	yaml := fmt.Sprintf(`listen:
  https: 127.0.0.1:%d
  dot: 127.0.0.1:0
  admin: ""
scopes:
  - name: test
    default_route: true
    servers: [%s]
fallback_servers: [127.0.0.1:1]
tls:
  mode: acme
  acme:
    domains: [%s]
    ca: https://127.0.0.1:%d/dir
    ca_root: %s
    storage: %s
log:
  format: json
`, httpsPort, startNSD(t), name, listenPort, api.CA, filepath.Join(dir, "acme"))
	d := startDohfwd(t, yaml, nil)
	dot := d.listenerAddr("dot")
	d.waitEvent(60*time.Second, func(ev map[string]any) bool { return ev["message"] == "certificate ready" })

	res, err := apiClient.Get(fmt.Sprintf("https://127.0.0.1:%d/roots/0", mgmtPort))
	if err != nil {
		t.Fatal(err)
	}
	root, _ := io.ReadAll(res.Body)
	res.Body.Close()
	rootFile := filepath.Join(dir, "root.pem")
	os.WriteFile(rootFile, root, 0o644)

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(root)
	if c, err := tls.Dial("tcp", dot, &tls.Config{RootCAs: pool, ServerName: name, NextProtos: []string{"dot"}}); err != nil {
		t.Errorf("TLS verified against the ACME root: %v", err)
	} else {
		c.Close()
	}
	// A client that sends no server name (dig +tls @IP) gets the
	// certificate of the first domain.
	if c, err := tls.Dial("tcp", dot, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"dot"}}); err != nil {
		t.Errorf("TLS without a server name: %v", err)
	} else {
		if names := c.ConnectionState().PeerCertificates[0].DNSNames; len(names) != 1 || names[0] != name {
			t.Errorf("TLS without a server name: certificate for %v", names)
		}
		c.Close()
	}
	host, port, _ := net.SplitHostPort(dot)
	// dig (OpenSSL); kdig's GnuTLS refuses Pebble's chain on the HTTPS
	// listener as well, so it is not the client here.
	out := runTool(t, "dig", "@"+host, "-p", port, "+tls", "+tls-ca="+rootFile, "+tls-hostname="+name, "www.e2e.test", "A")
	if !strings.Contains(out, "status: NOERROR") || !strings.Contains(out, "127.0.0.1") {
		t.Errorf("dig +tls with the ACME certificate:\n%s", out)
	}
}
