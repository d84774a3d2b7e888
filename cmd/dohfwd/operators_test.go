package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/engine/upstreamtest"
)

// demotionYAML is a scope whose first server is a closed port (refused at
// once, so demoted by the first question) and whose second answers, with
// a demotion long enough to watch.
func demotionYAML(closed, good string) string {
	return fmt.Sprintf(`listen:
  https: 127.0.0.1:0
  admin: 127.0.0.1:0
engine:
  demotion_period: 5m
scopes:
  - name: test
    default_route: true
    servers: [%s, %s]
fallback_servers: [127.0.0.1:1]
log:
  format: json
`, closed, good)
}

// squash is s with each run of spaces as one: tables compared by words.
func squash(s string) string { return regexp.MustCompile(` +`).ReplaceAllString(s, " ") }

// explainJSON fetches GET /explain from the admin listener.
func (d *dohfwd) explainJSON(name, qtype string) map[string]any {
	d.t.Helper()
	res, err := http.Get("http://" + d.Admin + "/explain?name=" + name + "&type=" + qtype)
	if err != nil {
		d.t.Fatal(err)
	}
	defer res.Body.Close()
	var x map[string]any
	if err := json.NewDecoder(res.Body).Decode(&x); err != nil || res.StatusCode != 200 {
		d.t.Fatalf("GET /explain: %d %v", res.StatusCode, err)
	}
	return x
}

// Explain, as JSON and as the `dohfwd explain` table, before and after a
// demotion: the server order, the marks, the next server and the cache
// change as the question's own did, and explaining sends nothing upstream.
func TestExplainBeforeAndAfterDemotion(t *testing.T) {
	t.Parallel()
	closed := upstreamtest.ClosedPort(t)
	good := upstreamtest.Start(t, upstreamtest.Answer("@ 120 IN A 192.0.2.7"))
	d := startDohfwd(t, demotionYAML(closed.String(), good.String()), newPKI(t))

	x := d.explainJSON("www.example.test", "A")
	servers := x["servers"].([]any)
	if x["scope"] != "test" || x["route"] != "default route" || x["next"] != closed.String() ||
		servers[0].(map[string]any)["demoted"] != false {
		t.Fatalf("before: %v", x)
	}
	table := runTool(t, binary, "explain", "--admin", d.Admin, "www.example.test", "A")
	for _, want := range []string{"scope test (default route)", "www.example.test. no - - no",
		"1 " + closed.String() + " ok - <- next attempt", "2 " + good.String() + " ok"} {
		if !strings.Contains(squash(table), want) {
			t.Errorf("explain table before lacks %q:\n%s", want, table)
		}
	}
	if n := len(good.Queries()); n != 0 {
		t.Fatalf("explain sent %d queries upstream", n)
	}

	_, m := d.query(d.client(), newQuery("www.example.test", dns.TypeA))
	if m == nil || m.Rcode != dns.RcodeSuccess {
		t.Fatalf("answer: %v", m)
	}

	x = d.explainJSON("www.example.test", "A")
	servers = x["servers"].([]any)
	first, last := servers[0].(map[string]any), servers[1].(map[string]any)
	if x["next"] != good.String() || first["address"] != good.String() || first["next"] != true ||
		last["address"] != closed.String() || last["demoted"] != true || last["demotion_remaining_s"].(float64) < 290 {
		t.Fatalf("after: %v", x)
	}
	c := x["candidates"].([]any)[0].(map[string]any)
	if c["cached"] != "answer" || c["ttl_remaining_s"].(float64) < 110 || c["ttl_remaining_s"].(float64) > 120 {
		t.Fatalf("after: cache %v", c)
	}
	table = runTool(t, binary, "explain", "--admin", d.Admin, "www.example.test")
	for _, want := range []string{"www.example.test. no answer 1", "1 " + good.String() + " ok - <- next attempt",
		"2 " + closed.String() + " demoted "} {
		if !strings.Contains(squash(table), want) {
			t.Errorf("explain table after lacks %q:\n%s", want, table)
		}
	}
	if n := len(good.Queries()); n != 1 {
		t.Fatalf("upstream got %d queries, want the question's 1 only", n)
	}
	// The question not yet cached goes where explain said.
	x = d.explainJSON("other.example.test", "AAAA")
	if x["next"] != good.String() || !strings.Contains(x["outcome"].(string), "asks other.example.test. of "+good.String()) {
		t.Fatalf("uncached: %v", x)
	}
	d.query(d.client(), newQuery("other.example.test", dns.TypeAAAA))
	if q := good.Queries(); len(q) != 2 || !strings.EqualFold(q[1].Msg.Question[0].Name, "other.example.test.") {
		t.Fatalf("the next question did not go to %s: %v", good, q)
	}
}

// The status page, loaded in headless Chromium against a running dohfwd
// with a demoted server, shows that server demoted with its countdown; a
// screenshot is kept as the test's artifact (go test -artifacts).
func TestStatusPageInChromium(t *testing.T) {
	t.Parallel()
	chromium := needBrowserTool(t, "chromium")
	closed := upstreamtest.ClosedPort(t)
	good := upstreamtest.Start(t, upstreamtest.Answer("@ 120 IN A 192.0.2.7"))
	d := startDohfwd(t, demotionYAML(closed.String(), good.String()), newPKI(t))
	d.query(d.client(), newQuery("www.example.test", dns.TypeA)) // demotes the closed port

	url := "http://" + d.Admin + "/"
	flags := []string{"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--virtual-time-budget=5000", "--window-size=1100,700"}
	row := regexp.MustCompile(`<tr class="server" data-address="` + regexp.QuoteMeta(closed.String()) +
		`" data-state="demoted"><td>[^<]+</td><td class="state">demoted</td><td class="countdown" data-until="[^"]+">(\d+m )?\d+s</td>`)
	home := t.TempDir()
	retryBrowser(t, "chromium", func(ctx context.Context) error {
		dom, err := runBrowser(ctx, home, chromium, append(flags, "--user-data-dir="+t.TempDir(), "--dump-dom", url)...)
		if err != nil {
			return err
		}
		if !strings.Contains(dom, `data-loaded="1"`) {
			return fmt.Errorf("the page never loaded /status:\n%s", dom)
		}
		if !row.MatchString(dom) {
			return fmt.Errorf("the page does not show %s demoted with a countdown:\n%s", closed, dom)
		}
		if !strings.Contains(dom, `data-address="`+good.String()+`" data-state="ok"`) {
			return fmt.Errorf("the page does not show %s ok:\n%s", good, dom)
		}
		return nil
	})
	shot := filepath.Join(t.ArtifactDir(), "status-page.png")
	retryBrowser(t, "chromium", func(ctx context.Context) error {
		os.Remove(shot)
		if _, err := runBrowser(ctx, home, chromium, append(flags, "--user-data-dir="+t.TempDir(), "--screenshot="+shot, url)...); err != nil {
			return err
		}
		f, err := os.Open(shot)
		if err != nil {
			return err
		}
		defer f.Close()
		img, err := png.Decode(f)
		if err != nil {
			return fmt.Errorf("screenshot: %w", err)
		}
		if b := img.Bounds(); b.Dx() < 1000 || b.Dy() < 600 {
			return fmt.Errorf("screenshot is %v", b)
		}
		return nil
	})
	t.Logf("screenshot: %s", shot)
}

// failingYAML is a scope of three servers that fail each its own way, with
// a short transaction timeout; extra is appended under engine:.
func failingYAML(servers []string, extra string) string {
	return fmt.Sprintf(`listen:
  https: 127.0.0.1:0
  admin: 127.0.0.1:0
engine:
  transaction_timeout: 300ms
%sscopes:
  - name: test
    default_route: true
    servers: [%s]
fallback_servers: [127.0.0.1:1]
log:
  format: json
`, extra, strings.Join(servers, ", "))
}

// edeOf returns the Extended DNS Error of m.
func edeOf(t *testing.T, m *dns.Msg) *dns.EDNS0_EDE {
	t.Helper()
	if o := m.IsEdns0(); o != nil {
		for _, op := range o.Option {
			if e, ok := op.(*dns.EDNS0_EDE); ok {
				return e
			}
		}
	}
	t.Fatalf("no EDE in %v", m)
	return nil
}

// One question meets a timeout, a SERVFAIL and a refused port: its
// SERVFAIL's EDE keeps info-code 22 and names the three attempts in order,
// in the wire form and in the JSON form; ede_servers: false hides them.
func TestEDENamesTheServersEndToEnd(t *testing.T) {
	t.Parallel()
	silent := upstreamtest.Start(t, upstreamtest.Drop())
	servfail := upstreamtest.Start(t, upstreamtest.Rcode(dns.RcodeServerFailure))
	closed := upstreamtest.ClosedPort(t)
	servers := []string{silent.String(), servfail.String(), closed.String()}
	want := silent.String() + "/udp timeout; " + servfail.String() + "/udp SERVFAIL; " + closed.String() + "/udp refused"
	pki := newPKI(t)

	d := startDohfwd(t, failingYAML(servers, ""), pki)
	q := newQuery("www.example.test", dns.TypeA)
	q.SetEdns0(1232, false)
	res, m := d.query(d.client(), q)
	if res.StatusCode != 200 || m == nil || m.Rcode != dns.RcodeServerFailure {
		t.Fatalf("status %d answer %v", res.StatusCode, m)
	}
	if e := edeOf(t, m); e.InfoCode != dns.ExtendedErrorCodeNoReachableAuthority || e.ExtraText != want {
		t.Fatalf("EDE %d %q, want 22 %q", e.InfoCode, e.ExtraText, want)
	}

	jr, err := d.client().Get("https://" + d.HTTPS + "/resolve?name=json.example.test&type=A")
	if err != nil {
		t.Fatal(err)
	}
	var j struct {
		Status  int
		Comment string
	}
	json.NewDecoder(jr.Body).Decode(&j)
	jr.Body.Close()
	if j.Status != dns.RcodeServerFailure || j.Comment != "EDE 22 (No Reachable Authority): "+want {
		t.Fatalf("JSON: %+v, want the same list in Comment", j)
	}

	hidden := startDohfwd(t, failingYAML(servers, "  ede_servers: false\n"), pki)
	_, m = hidden.query(hidden.client(), q)
	if e := edeOf(t, m); e.InfoCode != dns.ExtendedErrorCodeNoReachableAuthority || e.ExtraText != "" {
		t.Fatalf("ede_servers: false: EDE %d %q, want 22 and no list", e.InfoCode, e.ExtraText)
	}
}

// Each DoH answer carries Server-Timing: the first from upstream after
// two attempts (a refused port, then an answer) with their time, the
// second from the cache; curl shows it; listen.server_timing: false
// removes it.
func TestServerTimingEndToEnd(t *testing.T) {
	t.Parallel()
	closed := upstreamtest.ClosedPort(t)
	good := upstreamtest.Start(t, upstreamtest.Answer("@ 120 IN A 192.0.2.7"))
	pki := newPKI(t)
	d := startDohfwd(t, demotionYAML(closed.String(), good.String()), pki)
	c := d.client()
	res, _ := d.query(c, newQuery("www.example.test", dns.TypeA))
	upstream := regexp.MustCompile(`^source;desc=upstream, attempts;desc=2, upstream;dur=(\d+(\.\d+)?)$`)
	if m := upstream.FindStringSubmatch(res.Header.Get("Server-Timing")); m == nil || m[1] == "0" {
		t.Fatalf("first answer: Server-Timing %q", res.Header.Get("Server-Timing"))
	}
	res, _ = d.query(c, newQuery("www.example.test", dns.TypeA))
	if got := res.Header.Get("Server-Timing"); got != "source;desc=cache, attempts;desc=0, upstream;dur=0" {
		t.Fatalf("cached answer: Server-Timing %q", got)
	}
	out := runTool(t, "curl", "-sS", "-D", "-", "-o", "/dev/null", "--cacert", pki.CA,
		"https://"+d.HTTPS+"/resolve?name=localhost&type=A")
	if !strings.Contains(strings.ToLower(out), "server-timing: source;desc=local, attempts;desc=0, upstream;dur=0") {
		t.Fatalf("curl headers lack Server-Timing:\n%s", out)
	}

	off := startDohfwd(t, strings.Replace(demotionYAML(closed.String(), good.String()), "  admin: 127.0.0.1:0\n",
		"  admin: 127.0.0.1:0\n  server_timing: false\n", 1), pki)
	res, _ = off.query(off.client(), newQuery("www.example.test", dns.TypeA))
	if got := res.Header.Values("Server-Timing"); got != nil {
		t.Fatalf("server_timing: false: Server-Timing %q", got)
	}
}

// A DoH request's traceparent puts its trace-id and parent span on its
// question and attempt events, and traceresponse returns the trace with
// this server's span; without traceparent the events carry a trace-id
// dohfwd made, the one traceresponse returns. Identical questions asked
// together share one upstream question, whose event lists every trace.
func TestTraceContextEndToEnd(t *testing.T) {
	t.Parallel()
	slow := upstreamtest.Start(t, upstreamtest.Delay(time.Second, upstreamtest.Answer("@ 120 IN A 192.0.2.7")))
	d := startDohfwd(t, scopeYAML(slow.String()), newPKI(t))
	c := d.client()
	post := func(name, traceparent string) *http.Response {
		wire, _ := newQuery(name, dns.TypeA).Pack()
		req, _ := http.NewRequest("POST", d.URL(), bytes.NewReader(wire))
		req.Header.Set("content-type", "application/dns-message")
		if traceparent != "" {
			req.Header.Set("traceparent", traceparent)
		}
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res
	}
	traceresponse := regexp.MustCompile(`^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$`)
	eventsOf := func(qname string) (questions, attempts []map[string]any) {
		for _, ev := range d.Events(func(ev map[string]any) bool { return ev["qname"] == qname }) {
			switch ev["message"] {
			case "question":
				questions = append(questions, ev)
			case "attempt":
				attempts = append(attempts, ev)
			}
		}
		return
	}

	const traceID, parent = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	res := post("in.example.test", "00-"+traceID+"-"+parent+"-01")
	m := traceresponse.FindStringSubmatch(res.Header.Get("traceresponse"))
	if m == nil || m[1] != traceID || m[2] == parent || m[3] != "01" {
		t.Fatalf("traceresponse %q for trace %s", res.Header.Get("traceresponse"), traceID)
	}
	d.waitEvent(5*time.Second, func(ev map[string]any) bool { return ev["message"] == "question" && ev["qname"] == "in.example.test." })
	qs, as := eventsOf("in.example.test.")
	if len(qs) != 1 || len(as) != 1 {
		t.Fatalf("events: %v %v", qs, as)
	}
	for _, ev := range append(qs, as...) {
		if ev["trace_id"] != traceID || ev["parent_id"] != parent || ev["span_id"] != m[2] {
			t.Errorf("%s event %v lacks trace %s parent %s span %s", ev["message"], ev, traceID, parent, m[2])
		}
	}

	res = post("new.example.test", "")
	m = traceresponse.FindStringSubmatch(res.Header.Get("traceresponse"))
	if m == nil || m[1] == strings.Repeat("0", 32) {
		t.Fatalf("traceresponse %q without traceparent", res.Header.Get("traceresponse"))
	}
	d.waitEvent(5*time.Second, func(ev map[string]any) bool { return ev["message"] == "question" && ev["qname"] == "new.example.test." })
	qs, as = eventsOf("new.example.test.")
	for _, ev := range append(qs, as...) {
		if ev["trace_id"] != m[1] || ev["parent_id"] != nil {
			t.Errorf("%s event %v: want the trace-id made here, %s, and no parent", ev["message"], ev, m[1])
		}
	}

	// The first question leads (its upstream answers after 1 s); the
	// other two, sent once it is in flight, join it in either order.
	var wg sync.WaitGroup
	ids := []string{}
	for i := range 3 {
		id := fmt.Sprintf("%032x", i+1)
		ids = append(ids, id)
		wg.Go(func() { post("shared.example.test", "00-"+id+"-"+parent+"-01") })
		if i == 0 {
			d.waitInFlight(1, 5*time.Second)
		}
	}
	wg.Wait()
	d.waitEvent(5*time.Second, func(ev map[string]any) bool {
		return ev["message"] == "question" && ev["qname"] == "shared.example.test." && ev["attempts"] == 1.0
	})
	qs, _ = eventsOf("shared.example.test.")
	var served []any
	for _, ev := range qs {
		if ev["attempts"] == 1.0 {
			served, _ = ev["trace_ids"].([]any)
		} else if ev["joined_trace_id"] != ids[0] {
			t.Errorf("coalesced question %v does not name the trace it joined, %s", ev, ids[0])
		}
	}
	if len(served) == 3 && served[1] == ids[2] {
		served[1], served[2] = served[2], served[1]
	}
	if fmt.Sprint(served) != fmt.Sprint(ids) {
		t.Fatalf("the shared question's event lists traces %v, want %v", served, ids)
	}
}
