package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dohfwd/dohfwd/engine/upstreamtest"
)

// Encrypted upstreams end to end through the binary: real DoT servers
// (Debian's unbound with do-udp: no, and knot-resolver's kresd), real DoH
// clients in front (kdig, dig, curl), the upstream's certificate verified
// against upstream_tls.ca_file.

// encryptedYAML is a configuration with a scope per server: domains[i]
// routed to servers[i]; upstream_tls.ca_file is caFile.
func encryptedYAML(caFile string, domains, servers []string) string {
	var b strings.Builder
	b.WriteString("listen:\n  https: 127.0.0.1:0\n  admin: 127.0.0.1:0\nscopes:\n")
	for i := range domains {
		fmt.Fprintf(&b, "  - name: s%d\n    domains: [%s]\n    servers: [%q]\n", i, domains[i], servers[i])
	}
	fmt.Fprintf(&b, "fallback_servers: [127.0.0.1:1]\nupstream_tls:\n  ca_file: %s\nlog:\n  format: json\n", caFile)
	return b.String()
}

func TestUpstreamDoTRealServers(t *testing.T) {
	t.Parallel()
	ca := upstreamtest.NewCA(t)
	ub := upstreamtest.StartUnbound(t, needTool(t, "unbound"), ca)
	kr := upstreamtest.StartKresd(t, needTool(t, "kresd"), ca)
	ubURL, krURL := "tls://"+ub.DoT+"#localhost", "tls://"+kr.DoT+"#localhost"
	d := startDohfwd(t, encryptedYAML(ca.PEMFile(t, t.TempDir()), []string{"u.enc.test", "k.enc.test"},
		[]string{ubURL, krURL}), newPKI(t))

	// kdig and dig over DoH to dohfwd, dohfwd over DoT to each server.
	for i, c := range []struct{ tool, name, want string }{
		{"kdig", "a.u.enc.test", upstreamtest.EncUnboundA},
		{"dig", "b.u.enc.test", upstreamtest.EncUnboundA},
		{"kdig", "a.k.enc.test", upstreamtest.EncKresdA},
		{"dig", "b.k.enc.test", upstreamtest.EncKresdA},
	} {
		out := runTool(t, c.tool, d.digArgs("+https", c.name, "A")...)
		if !strings.Contains(out, "NOERROR") || !strings.Contains(out, c.want) {
			t.Fatalf("%d: %s %s: want %s:\n%s", i, c.tool, c.name, c.want, out)
		}
	}
	// curl, the JSON form.
	host, port, _ := net.SplitHostPort(d.HTTPS)
	out := runTool(t, "curl", "-sS", "--cacert", d.pki.CA, "--resolve", "localhost:"+port+":"+host,
		"https://localhost:"+port+"/resolve?name=c.u.enc.test&type=A")
	if !strings.Contains(out, `"Status":0`) || !strings.Contains(out, upstreamtest.EncUnboundA) {
		t.Fatalf("curl JSON: %s", out)
	}

	// The attempt events: transport dot, the first question on each
	// server on a new connection, the next on the same one.
	for _, srv := range []string{ub.DoT, kr.DoT} {
		var conns []string
		for _, ev := range d.eventsAtLeast(2, func(ev map[string]any) bool { return ev["message"] == "attempt" && ev["server"] == srv }) {
			if ev["transport"] != "dot" || ev["outcome"] != "answer" {
				t.Fatalf("attempt %v: want an answer over dot", ev)
			}
			conns = append(conns, fmt.Sprint(ev["conn"]))
		}
		if len(conns) < 2 || conns[0] != "new" || conns[1] != "reused" {
			t.Fatalf("%s: connections %v, want new then reused", srv, conns)
		}
	}

	// /status, dohfwd status and /metrics show each server's transport
	// and connections.
	st := d.status()
	for i, sc := range st["scopes"].([]any) {
		sv := sc.(map[string]any)["servers"].([]any)[0].(map[string]any)
		cs, _ := sv["connections"].(map[string]any)
		if sv["transport"] != "dot" || cs == nil || cs["open"].(float64) != 1 || cs["handshakes"].(float64) != 1 || cs["reused"].(float64) < 1 {
			t.Fatalf("scope %d status %v", i, sv)
		}
	}
	table, err := exec.Command(binary, "status", "--admin", d.Admin).CombinedOutput()
	if err != nil || !strings.Contains(string(table), ubURL) || !strings.Contains(string(table), "dot") ||
		!strings.Contains(string(table), "open 1, handshakes 1") {
		t.Fatalf("dohfwd status: %v\n%s", err, table)
	}
	res, err := http.Get("http://" + d.Admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	for _, want := range []string{
		`dohfwd_upstream_connections{server="` + ubURL + `",transport="dot"} 1`,
		`dohfwd_upstream_handshakes_total{server="` + krURL + `",transport="dot"} 1`,
		`dohfwd_upstream_reused_total{server="` + ubURL + `",transport="dot"}`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
}

// A wrong TLS name (unbound's certificate is for localhost): every attempt
// fails its handshake and says so, the question is unavailable, and the
// EDE names the server.
func TestUpstreamDoTWrongNameEndToEnd(t *testing.T) {
	t.Parallel()
	ca := upstreamtest.NewCA(t)
	ub := upstreamtest.StartUnbound(t, needTool(t, "unbound"), ca)
	url := "tls://" + ub.DoT + "#wrong.test"
	d := startDohfwd(t, encryptedYAML(ca.PEMFile(t, t.TempDir()), []string{"enc.test"}, []string{url}), newPKI(t))
	out := runTool(t, "kdig", d.digArgs("+https", "x.enc.test", "A")...)
	if !strings.Contains(out, "SERVFAIL") || !strings.Contains(out, url+"/dot tls handshake tls") {
		t.Fatalf("kdig: want SERVFAIL with an EDE naming %s:\n%s", url, out)
	}
	evs := d.eventsAtLeast(3, func(ev map[string]any) bool { return ev["message"] == "attempt" })
	if len(evs) != 3 || evs[0]["outcome"] != "handshake_error" || evs[0]["demoted"] != true {
		t.Fatalf("attempts %v: want three handshake errors, demoting", evs)
	}
}

// SIGHUP changes a server from plain UDP to tls:// under a trickle of
// questions: none is lost, and the answers come from the DoT server.
func TestUpstreamSIGHUPPlainToTLS(t *testing.T) {
	t.Parallel()
	ca := upstreamtest.NewCA(t)
	ub := upstreamtest.StartUnbound(t, needTool(t, "unbound"), ca)
	plain := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.1"))
	caFile := ca.PEMFile(t, t.TempDir())
	d := startDohfwd(t, encryptedYAML(caFile, []string{"enc.test"}, []string{plain.String()}), newPKI(t))
	tr := startTrickle(t, d, "enc.test")
	tr.waitAnswers(t, "192.0.2.1", 10)

	next := encryptedYAML(caFile, []string{"enc.test"}, []string{"tls://" + ub.DoT + "#localhost"})
	next += fmt.Sprintf("tls:\n  mode: files\n  cert_file: %s\n  key_file: %s\n", d.pki.Cert, d.pki.Key)
	os.WriteFile(d.config, []byte(next), 0o644)
	d.cmd.Process.Signal(syscall.SIGHUP)
	d.waitEvent(5*time.Second, func(ev map[string]any) bool { return ev["message"] == "reloaded" })
	tr.waitAnswers(t, upstreamtest.EncUnboundA, 20)
	tr.finish()
	if len(tr.failures) > 0 {
		t.Fatalf("%d of %d questions lost across the reload: %v", len(tr.failures), tr.sent.Load(), tr.failures)
	}
	for _, ev := range d.Events(func(ev map[string]any) bool { return ev["message"] == "attempt" && ev["server"] == ub.DoT }) {
		if ev["transport"] != "dot" {
			t.Fatalf("attempt to the DoT server over %v", ev["transport"])
		}
	}
	if st := d.status(); st["scopes"].([]any)[0].(map[string]any)["servers"].([]any)[0].(map[string]any)["transport"] != "dot" {
		t.Fatalf("status after the reload: %v", st["scopes"])
	}
}

// check-config and serve refuse a missing CA file and an unknown scheme
// by file, line and key.
func TestUpstreamTLSConfigRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, c := range []struct{ yaml, want string }{
		{"upstream_tls:\n  ca_file: /nonexistent/ca.pem\n", ":2: upstream_tls.ca_file: open /nonexistent/ca.pem: no such file or directory"},
		{"fallback_servers: [\"quic://192.0.2.1#x\"]\n", `:1: fallback_servers[0]: server "quic://192.0.2.1#x": unknown scheme "quic"`},
	} {
		path := dir + "/bad.yaml"
		os.WriteFile(path, []byte(c.yaml), 0o644)
		for _, cmd := range [][]string{{"check-config", path}, {"serve", "--config", path}} {
			out, err := exec.Command(binary, cmd...).CombinedOutput()
			if err == nil || !strings.Contains(string(out), path+c.want) {
				t.Errorf("dohfwd %s: %v\n%s\nwant %s%s", cmd[0], err, out, path, c.want)
			}
		}
	}
}

// eventsAtLeast waits up to 5 s for n events match takes (the log is
// written in batches) and returns those there are then.
func (d *dohfwd) eventsAtLeast(n int, match func(map[string]any) bool) []map[string]any {
	end := time.Now().Add(5 * time.Second)
	for {
		evs := d.Events(match)
		if len(evs) >= n || time.Now().After(end) {
			return evs
		}
		time.Sleep(20 * time.Millisecond)
	}
}
