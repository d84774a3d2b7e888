package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/engine/upstreamtest"
)

// A malformed file and an unknown key are refused by check-config and by
// serve, naming the file, the line and the key; serve does not start.
func TestBadConfigIsRefusedWithFileLineKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cases := map[string]struct{ yaml, want string }{
		"unknown.yaml":   {"listen:\n  https: 127.0.0.1:0\n  admn: 127.0.0.1:0\n", ":3: listen.admn: unknown key"},
		"malformed.yaml": {"log:\n  level: info\n\tformat: json\n", ":2: level: malformed YAML at or just after this line"},
		"type.yaml":      {"engine:\n  attempts: three\n", ":2: engine.attempts: wrong type"},
		"address.yaml":   {"scopes:\n  - name: a\n    servers: [10.0.0.300]\n", ":3: scopes[0].servers[0]:"},
		// What only the engine used to refuse: zones are refused, with the line.
		"zone.yaml": {"scopes:\n  - name: a\n    servers: [\"[fe80::1%eth0]:53\"]\n", ":3: scopes[0].servers[0]: server \"[fe80::1%eth0]:53\": IPv6 zones are not supported"},
	}
	for name, tc := range cases {
		path := filepath.Join(dir, name)
		os.WriteFile(path, []byte(tc.yaml), 0o644)
		for _, args := range [][]string{{"check-config", path}, {"serve", "--config", path}} {
			cmd := exec.Command(binary, args...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			done := make(chan error, 1)
			cmd.Start()
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
					t.Errorf("%s %s: exit %v, want 1", args[0], name, err)
				}
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				t.Fatalf("%s %s: still running: a bad file must stop it", args[0], name)
			}
			if !strings.Contains(stderr.String(), path+tc.want) {
				t.Errorf("%s %s: stderr %q does not name %q", args[0], name, stderr.String(), path+tc.want)
			}
		}
	}
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(good, []byte(scopeYAML("127.0.0.1:5353")), 0o644)
	if out := runTool(t, binary, "check-config", good); !strings.Contains(out, good+": ok") {
		t.Errorf("check-config good file: %q", out)
	}
	if out := runTool(t, binary, "check-config"); !strings.Contains(out, "(embedded default): ok") {
		t.Errorf("check-config embedded default: %q", out)
	}
	if out := runTool(t, binary, "version"); out != "dohfwd "+testVersion+"\n" {
		t.Errorf("version: %q", out)
	}
}

// trickle sends one query every 10 ms, each for a new name so none comes
// from the cache, until stop; it records every failure.
type trickle struct {
	sent, ok atomic.Int64
	mu       sync.Mutex
	failures []string
	answers  map[string]int // answer address -> count
	stop     chan struct{}
	done     sync.WaitGroup
}

func startTrickle(t *testing.T, d *dohfwd, domain string) *trickle {
	tr := &trickle{stop: make(chan struct{}), answers: map[string]int{}}
	c := d.client()
	tr.done.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-tr.stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			tr.done.Go(func() {
				tr.sent.Add(1)
				wire, _ := newQuery(fmt.Sprintf("n%d.%s", i, domain), dns.TypeA).Pack()
				res, err := c.Post(d.URL(), "application/dns-message", bytes.NewReader(wire))
				tr.mu.Lock()
				defer tr.mu.Unlock()
				if err != nil {
					tr.failures = append(tr.failures, err.Error())
					return
				}
				body, _ := io.ReadAll(res.Body)
				res.Body.Close()
				m := new(dns.Msg)
				if res.StatusCode != 200 || m.Unpack(body) != nil || m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 {
					tr.failures = append(tr.failures, fmt.Sprintf("status %d: %v", res.StatusCode, m))
					return
				}
				tr.ok.Add(1)
				tr.answers[m.Answer[0].(*dns.A).A.String()]++
			})
		}
	})
	return tr
}

// waitAnswers waits until at least n more answers came from addr than
// when it was called (the trickle is running through that server), for
// at most 10 s.
func (tr *trickle) waitAnswers(t *testing.T, addr string, n int) {
	t.Helper()
	count := func() int { tr.mu.Lock(); defer tr.mu.Unlock(); return tr.answers[addr] }
	want := count() + n
	for end := time.Now().Add(10 * time.Second); count() < want; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("the trickle got %d answers from %s in 10 s, want %d", count(), addr, want)
		}
	}
}

func (tr *trickle) finish() {
	close(tr.stop)
	tr.done.Wait()
}

// SIGHUP swaps the servers under a trickle of queries without losing
// one; a bad file is then refused with a logged error and the running
// configuration keeps answering.
func TestSIGHUPReloadUnderTrickle(t *testing.T) {
	t.Parallel()
	first := upstreamtest.Start(t, upstreamtest.Delay(20*time.Millisecond, upstreamtest.Answer("@ 60 IN A 192.0.2.1")))
	second := upstreamtest.Start(t, upstreamtest.Delay(20*time.Millisecond, upstreamtest.Answer("@ 60 IN A 192.0.2.2")))
	d := startDohfwd(t, scopeYAML(first.String()), newPKI(t))
	tr := startTrickle(t, d, "reload.test")
	tr.waitAnswers(t, "192.0.2.1", 10)

	// Point the scope at the second server, with the log level at warn.
	next := strings.Replace(scopeYAML(second.String()), "format: json", "format: json\n  level: warn", 1)
	next += fmt.Sprintf("tls:\n  mode: files\n  cert_file: %s\n  key_file: %s\n", d.pki.Cert, d.pki.Key)
	os.WriteFile(d.config, []byte(next), 0o644)
	d.cmd.Process.Signal(syscall.SIGHUP)
	d.waitEvent(5*time.Second, func(ev map[string]any) bool { return ev["message"] == "reloaded" })
	tr.waitAnswers(t, "192.0.2.2", 10)

	// A broken file: refused, the second server keeps answering.
	os.WriteFile(d.config, []byte("scopes:\n  - name: x\n    servers: [not-an-ip]\n"), 0o644)
	d.cmd.Process.Signal(syscall.SIGHUP)
	ev := d.waitEvent(5*time.Second, func(ev map[string]any) bool {
		return ev["level"] == "error" && strings.HasPrefix(fmt.Sprint(ev["message"]), "reload rejected")
	})
	if !strings.Contains(fmt.Sprint(ev["error"]), d.config+":3: scopes[0].servers[0]") {
		t.Errorf("rejected reload names no file:line:key: %v", ev)
	}
	tr.waitAnswers(t, "192.0.2.2", 10)
	tr.finish()

	if len(tr.failures) > 0 {
		t.Fatalf("%d of %d queries lost across reloads: %v", len(tr.failures), tr.sent.Load(), tr.failures)
	}
	if tr.answers["192.0.2.1"] == 0 || tr.answers["192.0.2.2"] == 0 {
		t.Fatalf("answers by server: %v", tr.answers)
	}
	st := d.status()
	if srv := st["scopes"].([]any)[0].(map[string]any)["servers"].([]any)[0].(map[string]any)["address"]; srv != second.String() {
		t.Errorf("after the refused reload the scope has %v, want %v", srv, second)
	}
	// log.level: warn took effect: no info events after the reload.
	lines := d.Lines()
	after := false
	for _, l := range lines {
		if strings.Contains(l, `"message":"reloaded"`) {
			after = true
			continue
		}
		if after && strings.Contains(l, `"level":"info"`) {
			t.Errorf("info event after reloading with level warn: %s", l)
			break
		}
	}
	t.Logf("%d queries, answers by server %v", tr.sent.Load(), tr.answers)
}

// SIGTERM stops accepting, lets questions in flight finish and exits 0.
func TestSIGTERMDrainsInFlight(t *testing.T) {
	t.Parallel()
	slow := upstreamtest.Start(t, upstreamtest.Delay(800*time.Millisecond, upstreamtest.Answer("@ 60 IN A 192.0.2.9")))
	d := startDohfwd(t, scopeYAML(slow.String()), newPKI(t))
	c := d.client()
	const n = 20
	var wg sync.WaitGroup
	errs := make(chan string, n)
	for i := range n {
		wg.Go(func() {
			res, m := d.query(c, newQuery(fmt.Sprintf("q%d.drain.test", i), dns.TypeA))
			if res.StatusCode != 200 || m == nil || len(m.Answer) != 1 {
				errs <- fmt.Sprintf("q%d: %d %v", i, res.StatusCode, m)
			}
		})
	}
	// Wait until every question is upstream, then ask the server to stop.
	for end := time.Now().Add(5 * time.Second); len(slow.Queries()) < n && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	d.waitEvent(2*time.Second, func(ev map[string]any) bool { return ev["message"] == "draining" })
	// New connections are refused while it drains: the listeners close
	// as the drain starts (waited for, not slept on).
	accepting := func() bool {
		res, err := http.Get("http://" + d.Admin + "/healthz")
		if err == nil {
			res.Body.Close()
		}
		return err == nil
	}
	for end := time.Now().Add(2 * time.Second); accepting(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Error("admin listener still accepting 2 s after SIGTERM")
			break
		}
	}
	d.wantDrained(&wg, errs)
	// Log events are written in batches: the ones of the drained
	// questions still reach stderr before the process exits.
	drained := func(msg string) int {
		return len(d.Events(func(ev map[string]any) bool {
			q, _ := ev["qname"].(string)
			return ev["message"] == msg && strings.HasSuffix(q, ".drain.test.")
		}))
	}
	if a, q := drained("attempt"), drained("question"); a != n || q != n {
		t.Errorf("%d attempt and %d question events for %d drained questions: events lost on SIGTERM", a, q, n)
	}
}

// One test for what an operator reads: the attempt and question events
// (JSON on stderr, every field), /metrics, /healthz and the status table
// with a demoted server.
func TestLogsMetricsAndStatusTable(t *testing.T) {
	t.Parallel()
	dead := upstreamtest.Start(t, upstreamtest.Rcode(dns.RcodeRefused))
	nsd := startNSD(t)
	d := startDohfwd(t, scopeYAML(dead.String(), nsd), newPKI(t))
	c := d.client()
	res, m := d.query(c, newQuery("www.e2e.test", dns.TypeA))
	if res.StatusCode != 200 || m == nil || len(m.Answer) != 1 {
		t.Fatalf("query: %d %v", res.StatusCode, m)
	}

	q := d.waitEvent(2*time.Second, func(ev map[string]any) bool { return ev["message"] == "question" && ev["qname"] == "www.e2e.test." })
	attempts := d.Events(func(ev map[string]any) bool { return ev["message"] == "attempt" })
	if len(attempts) != 2 {
		t.Fatalf("want 2 attempt events (refused, then answer), got %v", attempts)
	}
	fields := []string{"question", "qname", "qtype", "scope", "attempt", "server", "transport", "outcome", "rcode", "rtt_ms", "demoted", "time", "level"}
	for _, ev := range attempts {
		for _, f := range fields {
			if _, ok := ev[f]; !ok {
				t.Errorf("attempt event without %q: %v", f, ev)
			}
		}
	}
	a1, a2 := attempts[0], attempts[1]
	if a1["server"] != dead.String() || a1["outcome"] != "rcode" || a1["rcode"] != "REFUSED" || a1["demoted"] != true || a1["attempt"] != 1.0 ||
		a1["qname"] != "www.e2e.test." || a1["qtype"] != "A" || a1["scope"] != "test" || a1["transport"] != "udp" {
		t.Errorf("first attempt: %v", a1)
	}
	if a2["server"] != nsd || a2["outcome"] != "answer" || a2["rcode"] != "NOERROR" || a2["attempt"] != 2.0 || a2["question"] != a1["question"] {
		t.Errorf("second attempt: %v", a2)
	}
	if q["result"] != "answer" || q["attempts"] != 2.0 || q["cache_hit"] != false || q["question"] != a1["question"] {
		t.Errorf("question event: %v", q)
	}
	if _, ok := q["duration_ms"]; !ok {
		t.Errorf("question event without duration_ms: %v", q)
	}

	get := func(path string) string {
		res, err := http.Get("http://" + d.Admin + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != 200 {
			t.Fatalf("%s: %d", path, res.StatusCode)
		}
		return string(b)
	}
	metrics := get("/metrics")
	for _, want := range []string{
		"dohfwd_upstream_failed_total 1",
		"dohfwd_refused_total 0",
		"dohfwd_cancelled_total 0",
		"dohfwd_mismatched_replies_total 0",
		`dohfwd_attempts_total{outcome="rcode"} 1`,
		`dohfwd_attempts_total{outcome="answer"} 1`,
		`dohfwd_questions_total{result="answer"} 1`,
		"dohfwd_in_flight 0",
		`dohfwd_doh_requests_total{proto="h2",rcode="NOERROR",status="200"} 1`,
		`dohfwd_upstream_attempt_duration_seconds_count{server="` + nsd + `"} 1`,
		`dohfwd_upstream_attempt_duration_seconds_count{server="` + dead.String() + `"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if h := get("/healthz"); h != "ok\n" {
		t.Errorf("/healthz: %q", h)
	}

	table := runTool(t, binary, "status", "--admin", d.Admin)
	for _, want := range []string{
		"dohfwd " + testVersion, "SCOPE", "DEMOTED UNTIL",
		"test      " + dead.String(), "demoted", "fallback",
		"upstream_failed", "attempts rcode",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("status table lacks %q:\n%s", want, table)
		}
	}
	for _, line := range strings.Split(table, "\n") {
		if strings.Contains(line, nsd) && !strings.Contains(line, " ok ") {
			t.Errorf("nsd row: %q", line)
		}
	}
}

// wantDrained waits for the questions asked before a SIGTERM (wg; each
// failure one string on errs), then wants none lost, exit code 0 and a
// complete "stopped" event.
func (d *dohfwd) wantDrained(wg *sync.WaitGroup, errs chan string) {
	t := d.t
	t.Helper()
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error("lost in the drain:", e)
	}
	if code := d.wait(15 * time.Second); code != 0 {
		t.Fatalf("exit code %d, want 0", code)
	}
	if ev := d.Events(func(ev map[string]any) bool { return ev["message"] == "stopped" }); len(ev) != 1 || ev[0]["complete"] != true {
		t.Fatalf("stopped event: %v", ev)
	}
}
