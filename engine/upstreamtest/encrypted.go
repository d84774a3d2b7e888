package upstreamtest

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// Real encrypted upstream servers for the tests: Debian's unbound (DoT and
// DoH, do-udp: no, so that an answer proves the encrypted path) and
// knot-resolver's kresd (DoT), each answering local data for EncZone.

// EncZone is the name the encrypted servers answer: EncName A EncUnboundA
// from unbound, A EncKresdA from kresd (so a test tells them apart), and
// any name below it likewise.
const (
	EncZone     = "enc.test."
	EncUnboundA = "192.0.2.99"
	EncKresdA   = "192.0.2.98"
)

// Encrypted is a running encrypted upstream.
type Encrypted struct {
	DoT string // 127.0.0.1:port of its DoT listener
	DoH string // 127.0.0.1:port of its DoH listener ("" for kresd)
	// Name is the TLS name its certificate carries.
	Name string
	Cmd  *exec.Cmd
}

// StartUnbound runs unbound (path) serving DoT and DoH with cert for
// EncZone's local data, UDP and plain TCP off, until the test ends.
func StartUnbound(t testing.TB, path string, ca *CA) *Encrypted {
	t.Helper()
	dir := t.TempDir()
	certFile, keyFile := WriteLeaf(t, dir, "unbound", ca.Leaf(t, time.Now().Add(24*time.Hour), "localhost", "127.0.0.1"))
	return startEncrypted(t, "unbound", ca, true, func() (*exec.Cmd, string, string) {
		dot, doh := FreePort(t), FreePort(t)
		conf := filepath.Join(dir, "unbound.conf")
		os.WriteFile(conf, []byte(fmt.Sprintf(`server:
  interface: 127.0.0.1@%[1]d
  interface: 127.0.0.1@%[2]d
  tls-port: %[1]d
  https-port: %[2]d
  http-endpoint: "/dns-query"
  tls-service-key: %[3]q
  tls-service-pem: %[4]q
  do-udp: no
  use-syslog: no
  logfile: ""
  chroot: ""
  username: ""
  directory: %[5]q
  pidfile: ""
  num-threads: 1
  incoming-num-tcp: 1000
  local-zone: %[6]q redirect
  local-data: "%[6]s 300 A %[7]s"
remote-control:
  control-enable: no
`, dot, doh, keyFile, certFile, dir, EncZone, EncUnboundA)), 0o644)
		return exec.Command(path, "-d", "-c", conf), fmt.Sprintf("127.0.0.1:%d", dot), fmt.Sprintf("127.0.0.1:%d", doh)
	})
}

// StartKresd runs knot-resolver's kresd (path) serving DoT with cert for
// EncZone's local data until the test ends.
func StartKresd(t testing.TB, path string, ca *CA) *Encrypted {
	t.Helper()
	dir := t.TempDir()
	certFile, keyFile := WriteLeaf(t, dir, "kresd", ca.Leaf(t, time.Now().Add(24*time.Hour), "localhost", "127.0.0.1"))
	return startEncrypted(t, "kresd", ca, false, func() (*exec.Cmd, string, string) {
		dot := FreePort(t)
		conf := filepath.Join(dir, "kresd.conf")
		os.WriteFile(conf, []byte(fmt.Sprintf(`net.listen('127.0.0.1', %d, { kind = 'tls' })
net.tls(%q, %q)
policy.add(policy.suffix(policy.ANSWER({ [kres.type.A] = { rdata = kres.str2ip('%s'), ttl = 300 } }, true), { todname('%s') }))
`, dot, certFile, keyFile, EncKresdA, EncZone)), 0o644)
		rundir := filepath.Join(dir, "run")
		os.Mkdir(rundir, 0o755)
		return exec.Command(path, "-n", "-c", conf, rundir), fmt.Sprintf("127.0.0.1:%d", dot), ""
	})
}

// startEncrypted starts what command makes until its DoT listener
// answers EncZone (three tries, ports may be taken meanwhile).
func startEncrypted(t testing.TB, name string, ca *CA, doh bool, command func() (*exec.Cmd, string, string)) *Encrypted {
	t.Helper()
	for try := 1; ; try++ {
		cmd, dot, dohAddr := command()
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatalf("upstreamtest: %s: %v", name, err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		if dotAnswers(dot, ca.Pool(), 10*time.Second) {
			return &Encrypted{DoT: dot, DoH: dohAddr, Name: "localhost", Cmd: cmd}
		}
		cmd.Process.Kill()
		if try == 3 {
			t.Fatalf("upstreamtest: %s did not answer over DoT on %s:\n%s", name, dot, out.Bytes())
		}
	}
}

// dotAnswers waits until addr answers EncZone A over DoT.
func dotAnswers(addr string, roots *x509.CertPool, within time.Duration) bool {
	c := &dns.Client{Net: "tcp-tls", Timeout: 500 * time.Millisecond,
		TLSConfig: &tls.Config{ServerName: "localhost", RootCAs: roots}}
	q := new(dns.Msg).SetQuestion(EncZone, dns.TypeA)
	for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if r, _, err := c.Exchange(q, addr); err == nil && r.Rcode == dns.RcodeSuccess && len(r.Answer) > 0 {
			return true
		}
	}
	return false
}
