package main

import (
	"crypto/sha256"
	"crypto/tls"
	be "encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/engine/upstreamtest"
)

// listenerAddr waits for the listening event of the named listener.
func (d *dohfwd) listenerAddr(name string) string {
	d.t.Helper()
	ev := d.waitEvent(10*time.Second, func(ev map[string]any) bool {
		return ev["message"] == "listening" && ev["listener"] == name
	})
	return ev["addr"].(string)
}

// startDoT runs dohfwd with a DoT listener on yaml's scope and the test
// PKI; it returns the process and the DoT address.
func startDoT(t *testing.T, servers ...string) (*dohfwd, string) {
	t.Helper()
	yaml := strings.Replace(scopeYAML(servers...), "listen:\n", "listen:\n  dot: 127.0.0.1:0\n", 1)
	d := startDohfwd(t, yaml, newPKI(t))
	return d, d.listenerAddr("dot")
}

// kdig and dig over DoT, verifying the certificate against the test CA,
// get the same answer as over DoH; kdig pads its query, so its answer
// comes padded to 468 bytes (RFC 8467). A client that trusts another CA
// does not get through.
func TestKdigAndDigOverTLS(t *testing.T) {
	t.Parallel()
	d, dot := startDoT(t, startNSD(t))
	host, port, _ := net.SplitHostPort(dot)
	args := func(more ...string) []string {
		return append([]string{"@" + host, "-p", port, "+tls-ca=" + d.pki.CA, "+tls-hostname=localhost"}, more...)
	}
	out := runTool(t, "kdig", args("+tls", "+padding", "v6.e2e.test", "AAAA")...)
	if !strings.Contains(out, "status: NOERROR") || !strings.Contains(out, "2001:db8::1") ||
		!strings.Contains(out, "TLS session") || !strings.Contains(out, "Received 468 B") {
		t.Errorf("kdig +tls:\n%s", out)
	}
	out = runTool(t, "dig", args("+tls", "www.e2e.test", "A", "+noall", "+answer", "+comments")...)
	if !strings.Contains(out, "status: NOERROR") || !strings.Contains(out, "www.e2e.test.\t\t3600\tIN\tA\t127.0.0.1") {
		t.Errorf("dig +tls:\n%s", out)
	}

	other := newPKI(t) // a CA that did not sign the server's certificate
	cmd := exec.Command(needTool(t, "kdig"), "@"+host, "-p", port, "+tls-ca="+other.CA, "+tls-hostname=localhost",
		"+tls", "+retry=0", "+timeout=5", "www.e2e.test")
	if b, err := cmd.CombinedOutput(); err == nil && strings.Contains(string(b), "NOERROR") {
		t.Errorf("kdig trusting another CA got an answer:\n%s", b)
	}
}

// SIGTERM lets the DoT questions in flight be answered before the exit.
func TestSIGTERMDrainsDoT(t *testing.T) {
	t.Parallel()
	slow := upstreamtest.Start(t, upstreamtest.Delay(800*time.Millisecond, upstreamtest.Answer("@ 60 IN A 192.0.2.9")))
	d, dot := startDoT(t, slow.String())
	c, err := tls.Dial("tcp", dot, &tls.Config{RootCAs: d.pki.Pool, ServerName: "localhost", NextProtos: []string{"dot"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const n = 5
	var burst []byte
	for i := range n {
		wire, _ := newQuery(fmt.Sprintf("q%d.drain.test", i), dns.TypeA).Pack()
		be.BigEndian.PutUint16(wire, uint16(i))
		burst = append(be.BigEndian.AppendUint16(burst, uint16(len(wire))), wire...)
	}
	c.Write(burst)
	for end := time.Now().Add(5 * time.Second); len(slow.Queries()) < n && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	d.waitEvent(2*time.Second, func(ev map[string]any) bool { return ev["message"] == "draining" })
	if _, err := net.DialTimeout("tcp", dot, time.Second); err == nil {
		t.Error("DoT listener still accepting after SIGTERM")
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for range n {
		var l [2]byte
		if _, err := io.ReadFull(c, l[:]); err != nil {
			t.Fatalf("lost in the drain: %v", err)
		}
		b := make([]byte, be.BigEndian.Uint16(l[:]))
		io.ReadFull(c, b)
		m := new(dns.Msg)
		if m.Unpack(b) != nil || len(m.Answer) != 1 {
			t.Errorf("answer %v", m)
		}
	}
	if code := d.wait(15 * time.Second); code != 0 {
		t.Fatalf("exit code %d, want 0", code)
	}
	if ev := d.Events(func(ev map[string]any) bool { return ev["message"] == "stopped" }); len(ev) != 1 || ev[0]["complete"] != true {
		t.Fatalf("stopped event: %v", ev)
	}
}

// With the self-signed default, DoT and HTTPS serve the one certificate
// whose fingerprint the certificate event logs.
func TestDoTServesTheSelfSignedCertificate(t *testing.T) {
	t.Parallel()
	yaml := strings.Replace(scopeYAML("127.0.0.1:1"), "listen:\n", "listen:\n  dot: 127.0.0.1:0\n", 1)
	d := startDohfwd(t, yaml, nil)
	dot := d.listenerAddr("dot")
	ev := d.waitEvent(5*time.Second, func(ev map[string]any) bool { return ev["message"] == "certificate" })
	for _, addr := range []string{dot, d.HTTPS} {
		c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"dot", "h2"}})
		if err != nil {
			t.Fatalf("%s: %v", addr, err)
		}
		sum := sha256.Sum256(c.ConnectionState().PeerCertificates[0].Raw)
		c.Close()
		if got := hex.EncodeToString(sum[:]); got != ev["fingerprint"] {
			t.Errorf("%s serves %s, the logged certificate is %v", addr, got, ev["fingerprint"])
		}
	}
}
