package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/engine/upstreamtest"
)

// dnstapMessage is what the dnstap command (golang-dnstap's reader, -j)
// prints of one message.
type dnstapMessage struct {
	Type    string `json:"type"`
	Version string `json:"version"`
	Message struct {
		Type            string `json:"type"`
		SocketFamily    string `json:"socket_family"`
		SocketProtocol  string `json:"socket_protocol"`
		QueryAddress    string `json:"query_address"`
		ResponseAddress string `json:"response_address"`
		QueryPort       int    `json:"query_port"`
		ResponsePort    int    `json:"response_port"`
		QueryTime       string `json:"query_time"`
		ResponseTime    string `json:"response_time"`
		QueryMessage    string `json:"query_message"`
		ResponseMessage string `json:"response_message"`
	} `json:"message"`
}

// name is the question's name, read from the message's text.
func (m *dnstapMessage) name() string {
	text := m.Message.QueryMessage + m.Message.ResponseMessage
	if s := questionLine.FindStringSubmatch(text); s != nil {
		// Lowercased: a forwarder message carries the name as sent
		// upstream, in 0x20's random case.
		return strings.ToLower(s[1])
	}
	return ""
}

var questionLine = regexp.MustCompile(`;; QUESTION SECTION:\n;(\S+)`)

// startDnstapReader builds the dnstap command of golang-dnstap (the
// module this repository writes with) and runs it on a Unix socket in
// dir; stop ends it and returns every message it decoded.
func startDnstapReader(t *testing.T, dir string) (socket string, stop func() []dnstapMessage) {
	t.Helper()
	bin := filepath.Join(dir, "dnstap")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/dnstap/golang-dnstap/dnstap").CombinedOutput(); err != nil {
		t.Fatalf("building the dnstap reader: %v\n%s", err, out)
	}
	socket = filepath.Join(dir, "dnstap.sock")
	outPath := filepath.Join(dir, "dnstap.json")
	out, err := os.Create(outPath)
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd := exec.Command(bin, "-u", socket, "-j")
	cmd.Stdout, cmd.Stderr = out, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); out.Close(); close(exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-exited })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(socket); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dnstap reader made no socket: %s", stderr.String())
		}
	}
	return socket, func() []dnstapMessage {
		cmd.Process.Signal(syscall.SIGTERM) // it writes out what it holds
		<-exited
		f, err := os.Open(outPath)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var all []dnstapMessage
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var m dnstapMessage
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Fatalf("the reader printed %q: %v", sc.Text(), err)
			}
			all = append(all, m)
		}
		if len(all) == 0 {
			t.Logf("dnstap reader stderr:\n%s", stderr.String())
		}
		return all
	}
}

// Every question on every front end (DoH, DoT, DNS over UDP and TCP)
// reaches a real dnstap reader (golang-dnstap's dnstap command, over a
// Unix socket) as exactly four messages when it is forwarded and answered
// on its first attempt: CLIENT_QUERY and CLIENT_RESPONSE with the front
// end's protocol and addresses, FORWARDER_QUERY and FORWARDER_RESPONSE
// with the upstream's. An attempt more (a truncated UDP reply, then TCP)
// adds two forwarder messages; a cache hit is two client messages. Every
// message decodes, and /status and /metrics count them all sent.
func TestDnstapReaderCountsFourMessagesPerForwardedQuestion(t *testing.T) {
	t.Parallel()
	nsd := startNSD(t)
	truncating := upstreamtest.Start(t, upstreamtest.ByTransport(upstreamtest.Truncated(),
		upstreamtest.Answer("big.retry.test. 60 IN A 192.0.2.77")))
	dir := t.TempDir()
	socket, stopReader := startDnstapReader(t, dir)
	yaml := fmt.Sprintf(`listen:
  https: 127.0.0.1:0
  dot: 127.0.0.1:0
  doq: 127.0.0.1:0
  dns: 127.0.0.1:%d
  admin: 127.0.0.1:0
scopes:
  - name: test
    default_route: true
    servers: [%s]
  - name: retry
    domains: [retry.test]
    servers: [%s]
fallback_servers: [127.0.0.1:1]
dnstap:
  address: unix:%s
  queue: 1000
log:
  format: json
`, freePort(t), nsd, truncating, socket)
	d := startDohfwd(t, yaml, newPKI(t))
	d.waitEvent(10*time.Second, func(ev map[string]any) bool { return ev["message"] == "dnstap collector connected" })
	dot, plain := d.listenerAddr("dot"), d.listenerAddr("dns-udp")
	dotHost, dotPort, _ := net.SplitHostPort(dot)
	host, port, _ := net.SplitHostPort(plain)

	c := d.client()
	if res, m := d.query(c, newQuery("www.e2e.test", dns.TypeA)); res.StatusCode != 200 || m == nil || len(m.Answer) != 1 {
		t.Fatalf("DoH: %d %v", res.StatusCode, m)
	}
	if res, m := d.query(c, newQuery("www.e2e.test", dns.TypeA)); res.StatusCode != 200 || m == nil {
		t.Fatalf("DoH, again: %d %v", res.StatusCode, m)
	}
	runTool(t, "kdig", "@"+dotHost, "-p", dotPort, "+tls", "+tls-ca="+d.pki.CA, "+tls-hostname=localhost", "v6.e2e.test", "AAAA")
	doqHost, doqPort, _ := net.SplitHostPort(d.listenerAddr("doq"))
	runTool(t, "kdig", "@"+doqHost, "-p", doqPort, "+tls-ca="+d.pki.CA, "+tls-hostname=localhost", "+quic", "quic.e2e.test", "A")
	runTool(t, "dig", "@"+host, "-p", port, "+tries=1", "ttl.e2e.test", "A")
	runTool(t, "dig", "@"+host, "-p", port, "+tcp", "missing.e2e.test", "A")
	runTool(t, "dig", "@"+host, "-p", port, "+tries=1", "big.retry.test", "A")

	// SIGTERM: dohfwd answers what is in flight, then writes out its
	// queue and ends the Frame Streams session.
	st := d.status()
	d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(20 * time.Second); code != 0 {
		t.Fatalf("dohfwd exited %d", code)
	}
	msgs := stopReader()

	type key struct{ name, kind, protocol string }
	got := map[key]int{}
	for _, m := range msgs {
		if m.Type != "MESSAGE" || !strings.HasPrefix(m.Version, "dohfwd ") {
			t.Errorf("message %+v: want a MESSAGE from dohfwd", m)
		}
		got[key{m.name(), m.Message.Type, m.Message.SocketProtocol}]++
		mm := m.Message
		if mm.SocketFamily != "INET" || mm.ResponseAddress != "127.0.0.1" || mm.ResponsePort == 0 || mm.QueryTime == "" {
			t.Errorf("%s %s: family %q response %s:%d query time %q", m.name(), mm.Type, mm.SocketFamily, mm.ResponseAddress, mm.ResponsePort, mm.QueryTime)
		}
		switch mm.Type {
		case "CLIENT_QUERY", "FORWARDER_QUERY":
			if mm.QueryMessage == "" {
				t.Errorf("%s %s has no query message", m.name(), mm.Type)
			}
		case "CLIENT_RESPONSE", "FORWARDER_RESPONSE":
			if mm.ResponseMessage == "" || mm.ResponseTime == "" {
				t.Errorf("%s %s has no response message or time", m.name(), mm.Type)
			}
		}
		if strings.HasPrefix(mm.Type, "CLIENT_") && (mm.QueryAddress != "127.0.0.1" || mm.QueryPort == 0) {
			t.Errorf("%s %s: client %s:%d", m.name(), mm.Type, mm.QueryAddress, mm.QueryPort)
		}
		if strings.HasPrefix(mm.Type, "FORWARDER_") {
			want := nsd
			if m.name() == "big.retry.test." {
				want = truncating.String()
			}
			if got := net.JoinHostPort(mm.ResponseAddress, fmt.Sprint(mm.ResponsePort)); got != want {
				t.Errorf("%s %s went to %s, want %s", m.name(), mm.Type, got, want)
			}
		}
	}
	forwarded := func(name, protocol string) map[key]int {
		return map[key]int{
			{name, "CLIENT_QUERY", protocol}: 1, {name, "FORWARDER_QUERY", "UDP"}: 1,
			{name, "FORWARDER_RESPONSE", "UDP"}: 1, {name, "CLIENT_RESPONSE", protocol}: 1,
		}
	}
	want := map[key]int{}
	for _, part := range []map[key]int{
		forwarded("www.e2e.test.", "DOH"), forwarded("v6.e2e.test.", "DOT"),
		forwarded("ttl.e2e.test.", "UDP"), forwarded("missing.e2e.test.", "TCP"),
		// DOQ is dnstap.proto's SocketProtocol 7; golang-dnstap v0.4.0's
		// generated enum predates it, so its reader prints the number.
		forwarded("quic.e2e.test.", "7"),
		forwarded("big.retry.test.", "UDP"),
		{{"big.retry.test.", "FORWARDER_QUERY", "TCP"}: 1, {"big.retry.test.", "FORWARDER_RESPONSE", "TCP"}: 1},
		{{"www.e2e.test.", "CLIENT_QUERY", "DOH"}: 1, {"www.e2e.test.", "CLIENT_RESPONSE", "DOH"}: 1}, // the cache hit
	} {
		for k, n := range part {
			want[k] += n
		}
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("%s %s over %s: %d messages, want %d", k.name, k.kind, k.protocol, got[k], n)
		}
	}
	for k, n := range got {
		if want[k] == 0 {
			t.Errorf("unexpected: %d × %s %s over %s", n, k.name, k.kind, k.protocol)
		}
	}
	total := 0
	for _, n := range want {
		total += n
	}
	if len(msgs) != total {
		t.Errorf("the reader decoded %d messages, want %d", len(msgs), total)
	}
	dt, _ := st["dnstap"].(map[string]any)
	if dt == nil || dt["dropped"] != float64(0) {
		t.Errorf("/status dnstap %v, want none dropped", st["dnstap"])
	}
}

// With the collector away, questions are answered as ever and the
// messages that do not fit the queue are dropped, counted in /status and
// /metrics.
func TestDnstapCollectorAwayDropsAndCounts(t *testing.T) {
	t.Parallel()
	socket := filepath.Join(t.TempDir(), "nobody.sock")
	yaml := fmt.Sprintf(`listen:
  https: 127.0.0.1:0
  admin: 127.0.0.1:0
hosts: {a.test: [192.0.2.1]}
fallback_servers: [127.0.0.1:1]
dnstap:
  address: unix:%s
  queue: 1
log:
  format: json
`, socket)
	d := startDohfwd(t, yaml, newPKI(t))
	c := d.client()
	for range 3 {
		if res, m := d.query(c, newQuery("a.test", dns.TypeA)); res.StatusCode != 200 || m == nil || len(m.Answer) != 1 {
			t.Fatalf("a.test: %d %v", res.StatusCode, m)
		}
	}
	// Six messages, one of which waits in the queue.
	dt, _ := d.status()["dnstap"].(map[string]any)
	if dt == nil || dt["dropped"] != float64(5) || dt["sent"] != float64(0) {
		t.Errorf("/status dnstap %v, want 5 dropped and none sent", dt)
	}
	res, err := http.Get("http://" + d.Admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(body), "dohfwd_dnstap_messages_total{result=\"dropped\"} 5\n") {
		t.Errorf("/metrics has no dnstap drops:\n%s", body)
	}
}
