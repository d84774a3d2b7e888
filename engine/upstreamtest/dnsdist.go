package upstreamtest

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// StartDnsdistDoH runs dnsdist (path) as a DoH server (addDOHLocal, its
// certificate from ca for localhost and 127.0.0.1) in front of backend, a
// plain DNS server (nsd), until the test ends: a second DoH server
// implementation beside unbound. probe is a name backend answers, to see
// it ready. Its DoH field is the listener's address.
func StartDnsdistDoH(t testing.TB, path string, ca *CA, backend, probe string) *Encrypted {
	t.Helper()
	dir := t.TempDir()
	certFile, keyFile := WriteLeaf(t, dir, "dnsdist", ca.Leaf(t, time.Now().Add(24*time.Hour), "localhost", "127.0.0.1"))
	for try := 1; ; try++ {
		addr := fmt.Sprintf("127.0.0.1:%d", FreePort(t))
		conf := filepath.Join(dir, "dnsdist.conf")
		os.WriteFile(conf, []byte(fmt.Sprintf(`setSecurityPollSuffix("")
setACL({"127.0.0.0/8"})
newServer({address=%q})
addDOHLocal(%q, %q, %q, "/dns-query")
`, backend, addr, certFile, keyFile)), 0o644)
		cmd := exec.Command(path, "--supervised", "--disable-syslog", "-C", conf)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatalf("upstreamtest: dnsdist: %v", err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		if DoHAnswers(addr, ca.Pool(), probe, 10*time.Second) {
			return &Encrypted{DoH: addr, Name: "localhost", Cmd: cmd}
		}
		cmd.Process.Kill()
		if try == 3 {
			t.Fatalf("upstreamtest: dnsdist did not answer %s over DoH on %s:\n%s", probe, addr, out.Bytes())
		}
	}
}

// DoHAnswers waits until the DoH server at addr (TLS name localhost,
// path /dns-query) answers name A with NOERROR and a record.
func DoHAnswers(addr string, roots *x509.CertPool, name string, within time.Duration) bool {
	c := &http.Client{Timeout: 500 * time.Millisecond, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{ServerName: "localhost", RootCAs: roots}, ForceAttemptHTTP2: true}}
	defer c.CloseIdleConnections()
	q, _ := new(dns.Msg).SetQuestion(dns.Fqdn(name), dns.TypeA).Pack()
	for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		res, err := c.Post("https://"+addr+"/dns-query", "application/dns-message", bytes.NewReader(q))
		if err != nil {
			continue
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		var r dns.Msg
		if res.StatusCode == 200 && r.Unpack(body) == nil && r.Rcode == dns.RcodeSuccess && len(r.Answer) > 0 {
			return true
		}
	}
	return false
}
