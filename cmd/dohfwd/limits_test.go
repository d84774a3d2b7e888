package main

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/engine/upstreamtest"
)

// limitsYAML is scopeYAML with a limits section; prefix_v4 32 makes each
// loopback address its own client.
func limitsYAML(limits string, servers ...string) string {
	return scopeYAML(servers...) + "limits:\n  prefix_v4: 32\n" + limits
}

// metric reads one sample of the admin listener's /metrics.
func (d *dohfwd) metric(name string) float64 {
	d.t.Helper()
	res, err := http.Get("http://" + d.Admin + "/metrics")
	if err != nil {
		d.t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		d.t.Fatalf("/metrics has no %s", name)
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

// clientFrom is an HTTP/2 client whose connections come from src.
func (d *dohfwd) clientFrom(src string) *http.Client {
	c := d.client()
	c.Transport.(*http.Transport).DialContext = (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}).DialContext
	return c
}

// Over client_qps a DoH client gets 429 with Retry-After, the upstream is
// never asked for the refused questions, the refusals are counted, and
// another client is served meanwhile. A SIGHUP reload lifting the limit
// lets the client through again.
func TestClientRateLimitOverDoHAndReload(t *testing.T) {
	t.Parallel()
	up := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.7"))
	d := startDohfwd(t, limitsYAML("  client_qps: 0.2\n  client_burst: 3\n", up.String()), newPKI(t))
	c := d.clientFrom("127.0.0.1")
	var ok, limited int
	for i := range 10 {
		res, _ := d.query(c, newQuery(fmt.Sprintf("n%d.rate.test", i), dns.TypeA))
		switch res.StatusCode {
		case http.StatusOK:
			ok++
		case http.StatusTooManyRequests:
			limited++
			if ra, err := strconv.Atoi(res.Header.Get("Retry-After")); err != nil || ra < 1 || ra > 5 {
				t.Errorf("Retry-After %q, want 1..5 s (0.2 q/s)", res.Header.Get("Retry-After"))
			}
		default:
			t.Fatalf("status %d", res.StatusCode)
		}
	}
	if ok != 3 || limited != 7 {
		t.Fatalf("%d answered and %d limited, want the burst of 3 and 7", ok, limited)
	}
	if n := len(up.Queries()); n != 3 {
		t.Fatalf("the upstream was asked %d times, want 3: refused questions must not reach it", n)
	}
	if res, _ := d.query(d.clientFrom("127.0.0.2"), newQuery("other.rate.test", dns.TypeA)); res.StatusCode != http.StatusOK {
		t.Fatalf("another client got %d", res.StatusCode)
	}
	if v := d.metric(`dohfwd_limit_refusals_total{limit="client_qps"}`); v != 7 {
		t.Fatalf("client_qps refusals metric %v, want 7", v)
	}
	// The JSON form is limited the same way, with a JSON error.
	res, err := c.Get("https://" + d.HTTPS + "/resolve?name=json.rate.test")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(body), `"error"`) {
		t.Fatalf("JSON form: %d %s", res.StatusCode, body)
	}

	// Reload without the rate limit: the same client is answered.
	cfg := limitsYAML("", up.String()) + fmt.Sprintf("tls:\n  mode: files\n  cert_file: %s\n  key_file: %s\n", d.pki.Cert, d.pki.Key)
	os.WriteFile(d.config, []byte(cfg), 0o644)
	d.cmd.Process.Signal(syscall.SIGHUP)
	d.waitEvent(5*time.Second, func(ev map[string]any) bool { return ev["message"] == "reloaded" })
	for i := range 10 {
		if res, _ := d.query(c, newQuery(fmt.Sprintf("after%d.rate.test", i), dns.TypeA)); res.StatusCode != http.StatusOK {
			t.Fatalf("after the reload query %d got %d", i, res.StatusCode)
		}
	}
	// And a reload that sets it again limits at once (a fresh bucket: 1).
	cfg = limitsYAML("  client_qps: 0.1\n", up.String()) + fmt.Sprintf("tls:\n  mode: files\n  cert_file: %s\n  key_file: %s\n", d.pki.Cert, d.pki.Key)
	os.WriteFile(d.config, []byte(cfg), 0o644)
	d.cmd.Process.Signal(syscall.SIGHUP)
	reloads := 0
	d.waitEvent(5*time.Second, func(ev map[string]any) bool {
		if ev["message"] == "reloaded" {
			reloads++
		}
		return reloads == 2
	})
	d.query(c, newQuery("again1.rate.test", dns.TypeA))
	if res, _ := d.query(c, newQuery("again2.rate.test", dns.TypeA)); res.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("after the second reload got %d, want 429", res.StatusCode)
	}
	if lines := d.Events(func(e map[string]any) bool { return strings.Contains(fmt.Sprint(e["message"]), "rate") }); len(lines) > 0 {
		t.Errorf("a log line per refused query: %v", lines[0])
	}
}

// One client holding its client_in_flight share of a blackholed upstream
// cannot take more, and another client is still answered at once.
func TestClientInFlightShare(t *testing.T) {
	t.Parallel()
	nsd := startNSD(t)
	hole := upstreamtest.Start(t, upstreamtest.Drop())
	yaml := strings.Replace(limitsYAML("  client_in_flight: 2\n", nsd),
		"fallback_servers:", fmt.Sprintf("  - name: hole\n    domains: [hole.test]\n    servers: [%s]\nfallback_servers:", hole), 1)
	d := startDohfwd(t, yaml, newPKI(t))
	greedy := d.clientFrom("127.0.0.1")
	statuses := make(chan string, 8)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			res, m := d.query(greedy, newQuery(fmt.Sprintf("q%d.hole.test", i), dns.TypeA))
			s := strconv.Itoa(res.StatusCode)
			if m != nil {
				s += " " + dns.RcodeToString[m.Rcode]
			}
			statuses <- s
		})
	}
	// While they wait, the other client gets its answer from nsd.
	deadline := time.Now().Add(5 * time.Second)
	for len(hole.Queries()) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	res, m := d.query(d.clientFrom("127.0.0.2"), newQuery("www.e2e.test", dns.TypeA))
	if res.StatusCode != http.StatusOK || m == nil || m.Rcode != dns.RcodeSuccess {
		t.Fatalf("the other client got %d %v", res.StatusCode, m)
	}
	t.Logf("the other client answered in %v", time.Since(start))
	wg.Wait()
	close(statuses)
	count := map[string]int{}
	for s := range statuses {
		count[s]++
	}
	// Two questions held the share (SERVFAIL after their attempts); the
	// other six were refused: 429 before the engine, or REFUSED (EDE 18)
	// by the engine when they raced past the admission.
	if count["200 SERVFAIL"] != 2 || count["429"]+count["200 REFUSED"] != 6 {
		t.Fatalf("statuses %v, want 2 SERVFAIL and 6 refused", count)
	}
	// The hole saw only the two questions' attempts, never 2 at once more.
	if v := d.metric(`dohfwd_limit_refusals_total{limit="client_in_flight"}`); v < 6 {
		t.Fatalf("client_in_flight refusals %v, want at least 6", v)
	}
}

// client_connections and connections close what is past them; closing a
// connection frees its slot.
func TestConnectionLimits(t *testing.T) {
	t.Parallel()
	d := startDohfwd(t, limitsYAML("  client_connections: 2\n  connections: 3\n", "127.0.0.1:1"), newPKI(t))
	dial := func(src string) (*tls.Conn, error) {
		dl := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
		return tls.DialWithDialer(dl, "tcp", d.HTTPS, &tls.Config{RootCAs: d.pki.Pool, ServerName: "localhost"})
	}
	mustDial := func(src string) *tls.Conn {
		c, err := dial(src)
		if err != nil {
			t.Fatalf("connection from %s refused: %v", src, err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	a1 := mustDial("127.0.0.1")
	mustDial("127.0.0.1")
	if c, err := dial("127.0.0.1"); err == nil {
		c.Close()
		t.Fatal("a third connection from one client was taken")
	}
	mustDial("127.0.0.2")
	if c, err := dial("127.0.0.3"); err == nil {
		c.Close()
		t.Fatal("a fourth connection in all was taken")
	}
	a1.Close()
	deadline := time.Now().Add(5 * time.Second)
	for d.metric("dohfwd_connections_open") > 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	mustDial("127.0.0.1")
	if v := d.metric(`dohfwd_limit_refusals_total{limit="client_connections"}`); v != 1 {
		t.Errorf("client_connections refusals %v, want 1", v)
	}
	if v := d.metric(`dohfwd_limit_refusals_total{limit="connections"}`); v != 1 {
		t.Errorf("connections refusals %v, want 1", v)
	}
	if st := d.status(); st["connections"].(float64) != 3 || st["goroutines"].(float64) <= 0 {
		t.Errorf("/status connections %v goroutines %v", st["connections"], st["goroutines"])
	}
}

// Plain DNS and DoT clients over client_qps get REFUSED with EDE 18
// (Prohibited), as dig shows it.
func TestRateLimitOverPlainDNSAndDoT(t *testing.T) {
	t.Parallel()
	nsd := startNSD(t)
	yaml := strings.Replace(limitsYAML("  client_qps: 0.01\n  client_burst: 1\n", nsd), "listen:\n",
		"listen:\n  dns: 127.0.0.1:0\n  dot: 127.0.0.1:0\n", 1)
	d := startDohfwd(t, yaml, newPKI(t))
	for _, tc := range []struct {
		listener, src string
		args          []string
	}{
		{"dns-udp", "127.0.0.1", nil},
		{"dot", "127.0.0.2", []string{"+tls", "+tls-ca=" + d.pki.CA, "+tls-hostname=localhost"}},
	} {
		host, port, _ := net.SplitHostPort(d.listenerAddr(tc.listener))
		args := append([]string{"@" + host, "-p", port, "-b", tc.src, "+tries=1", "+timeout=5"}, tc.args...)
		first := runTool(t, "dig", append(args, "www.e2e.test", "A")...)
		if !strings.Contains(first, "status: NOERROR") {
			t.Fatalf("%s: first query not answered:\n%s", tc.listener, first)
		}
		second := runTool(t, "dig", append(args, "v6.e2e.test", "AAAA")...)
		if !strings.Contains(second, "status: REFUSED") || !strings.Contains(second, "EDE: 18 (Prohibited)") {
			t.Fatalf("%s: second query not REFUSED with EDE 18:\n%s", tc.listener, second)
		}
	}
	if v := d.metric(`dohfwd_limit_refusals_total{limit="client_qps"}`); v != 2 {
		t.Errorf("client_qps refusals %v, want 2", v)
	}
}
