package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/engine/upstreamtest"
)

// One server for the front-end tests: nsd for e2e.test (default route),
// upstreamtest servers for the fault cases, each on its own domain.
func startFrontendServer(t *testing.T) (d *dohfwd, counted, dropping *upstreamtest.Server) {
	nsd := startNSD(t)
	counted = upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.7"))
	servfail := upstreamtest.Start(t, upstreamtest.Rcode(dns.RcodeServerFailure))
	dropping = upstreamtest.Start(t, upstreamtest.Drop())
	yaml := fmt.Sprintf(`listen:
  https: 127.0.0.1:0
  admin: 127.0.0.1:0
scopes:
  - name: test
    default_route: true
    servers: [%s]
  - name: counted
    domains: [counted.test]
    servers: [%s]
  - name: servfail
    domains: [fail.test]
    servers: [%s]
  - name: slow
    domains: [slow.test]
    servers: [%s]
fallback_servers: [127.0.0.1:1]
log:
  format: json
`, nsd, counted, servfail, dropping)
	return startDohfwd(t, yaml, newPKI(t)), counted, dropping
}

// Every kind of bad input gets its documented status, never reaches the
// upstream, and the server answers a good query afterwards.
func TestBadInputMatrix(t *testing.T) {
	t.Parallel()
	d, counted, _ := startFrontendServer(t)
	c := d.client()

	pack := func(m *dns.Msg) []byte {
		b, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	good := newQuery("a.counted.test", dns.TypeA)
	good.Id = 0
	response := newQuery("a.counted.test", dns.TypeA)
	response.Response = true
	noQuestion := newQuery("a.counted.test", dns.TypeA)
	noQuestion.Question = nil
	twoQuestions := newQuery("a.counted.test", dns.TypeA)
	twoQuestions.Question = append(twoQuestions.Question, dns.Question{Name: "b.counted.test.", Qtype: dns.TypeA, Qclass: dns.ClassINET})
	b64 := func(m *dns.Msg) string { return base64.RawURLEncoding.EncodeToString(pack(m)) }

	cases := []struct {
		name        string
		method, url string
		ctype       string
		body        []byte
		status      int
	}{
		{"no dns parameter", "GET", d.URL(), "", nil, 400},
		{"bad base64url", "GET", d.URL() + "?dns=%21%21not*base64", "", nil, 400},
		{"padded base64", "GET", d.URL() + "?dns=" + base64.URLEncoding.EncodeToString(pack(good)[:5]), "", nil, 400},
		{"response as query", "GET", d.URL() + "?dns=" + b64(response), "", nil, 400},
		{"QDCOUNT 0", "GET", d.URL() + "?dns=" + b64(noQuestion), "", nil, 400},
		{"QDCOUNT 2", "POST", d.URL(), "application/dns-message", pack(twoQuestions), 400},
		{"undecodable body", "POST", d.URL(), "application/dns-message", []byte{1, 2, 3}, 400},
		{"65536-byte body", "POST", d.URL(), "application/dns-message", bytes.Repeat([]byte{0}, 65536), 413},
		{"wrong content type", "POST", d.URL(), "text/plain", pack(good), 415},
		{"PUT", "PUT", d.URL(), "application/dns-message", pack(good), 405},
		{"unknown path", "GET", "https://" + d.HTTPS + "/dns", "", nil, 404},
	}
	for _, tc := range cases {
		req, _ := http.NewRequest(tc.method, tc.url, bytes.NewReader(tc.body))
		if tc.ctype != "" {
			req.Header.Set("Content-Type", tc.ctype)
		}
		res, err := c.Do(req)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != tc.status {
			t.Errorf("%s: status %d, want %d", tc.name, res.StatusCode, tc.status)
		}
		if tc.status == 405 && !strings.Contains(res.Header.Get("Allow"), "POST") {
			t.Errorf("%s: Allow %q", tc.name, res.Header.Get("Allow"))
		}
		// The server still answers a good query.
		res, m := d.query(c, good)
		if res.StatusCode != 200 || m == nil || m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 {
			t.Fatalf("after %s: good query got %d %v", tc.name, res.StatusCode, m)
		}
	}
	// Only the good queries went upstream (the first one; the rest came
	// from the cache), never a bad one.
	for _, q := range counted.Queries() {
		if q.Msg == nil || len(q.Msg.Question) != 1 || !strings.EqualFold(q.Msg.Question[0].Name, "a.counted.test.") {
			t.Errorf("bad input reached the upstream: %v", q.Msg)
		}
	}
	if len(counted.Queries()) == 0 {
		t.Error("the good query never reached the upstream")
	}

	// Another opcode is a DNS NOTIMP, with HTTP 200.
	notify := newQuery("a.counted.test", dns.TypeSOA)
	notify.Opcode = dns.OpcodeNotify
	res, m := d.query(c, notify)
	if res.StatusCode != 200 || m == nil || m.Rcode != dns.RcodeNotImplemented {
		t.Errorf("NOTIFY: %d %v", res.StatusCode, m)
	}
}

// Cache-Control: the answer's smallest TTL, the SOA's for a negative
// answer, no-store for SERVFAIL.
func TestCacheControl(t *testing.T) {
	t.Parallel()
	d, _, _ := startFrontendServer(t)
	c := d.client()
	for _, tc := range []struct {
		name  string
		qtype uint16
		want  string
	}{
		{"ttl.e2e.test", dns.TypeA, "max-age=45"},   // A with TTL 45
		{"nope.e2e.test", dns.TypeA, "max-age=120"}, // NXDOMAIN: SOA minimum 120 < SOA TTL 300
		{"www.e2e.test", dns.TypeMX, "max-age=120"}, // NODATA, same
		{"x.fail.test", dns.TypeA, "no-store"},      // upstream SERVFAIL
		{"localhost", dns.TypeA, ""},                // local answer: checked below
	} {
		res, m := d.query(c, newQuery(tc.name, tc.qtype))
		got := res.Header.Get("Cache-Control")
		if tc.want == "" {
			if !strings.HasPrefix(got, "max-age=") || m == nil || len(m.Answer) != 1 {
				t.Errorf("%s: Cache-Control %q, %v", tc.name, got, m)
			}
			continue
		}
		if got != tc.want {
			t.Errorf("%s %s: Cache-Control %q, want %q", tc.name, dns.TypeToString[tc.qtype], got, tc.want)
		}
	}
}

// A padded query gets a padded answer (RFC 8467: multiple of 468), and
// the answer carries the client's ID.
func TestPaddingAndIDRestore(t *testing.T) {
	t.Parallel()
	d, _, _ := startFrontendServer(t)
	c := d.client()
	q := newQuery("www.e2e.test", dns.TypeA)
	q.Id = 0xBEEF
	q.SetEdns0(1232, false)
	opt := q.IsEdns0()
	opt.Option = append(opt.Option, &dns.EDNS0_PADDING{Padding: make([]byte, 100)})
	wire, _ := q.Pack()
	res, err := c.Post(d.URL(), "application/dns-message", bytes.NewReader(wire))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if len(body)%468 != 0 {
		t.Errorf("padded query: answer of %d bytes, not a multiple of 468", len(body))
	}
	m := new(dns.Msg)
	if err := m.Unpack(body); err != nil || m.Id != 0xBEEF || len(m.Answer) != 1 {
		t.Fatalf("answer %v (%v): want ID 0xBEEF and one record", m, err)
	}

	plain := newQuery("www.e2e.test", dns.TypeA)
	plain.Id = 0x1234
	_, m = d.query(c, plain)
	if m == nil || m.Id != 0x1234 {
		t.Fatalf("unpadded query: %v", m)
	}
	if o := m.IsEdns0(); o != nil {
		for _, e := range o.Option {
			if e.Option() == dns.EDNS0PADDING {
				t.Error("an unpadded query got a padded answer")
			}
		}
	}
}

// A client that goes away cancels its question: the server is not
// charged (no demotion, no upstream_failed) and the attempt is counted as
// cancelled.
func TestClientCancelIsNotCharged(t *testing.T) {
	t.Parallel()
	d, _, dropping := startFrontendServer(t)
	c := d.client()
	wire, _ := newQuery("gone.slow.test", dns.TypeA).Pack()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", d.URL(), bytes.NewReader(wire))
	req.Header.Set("Content-Type", "application/dns-message")
	if res, err := c.Do(req); err == nil {
		res.Body.Close()
		t.Fatalf("the dropping upstream answered: %d", res.StatusCode)
	}
	ev := d.waitEvent(5*time.Second, func(ev map[string]any) bool {
		return ev["message"] == "attempt" && ev["qname"] == "gone.slow.test."
	})
	if ev["outcome"] != "cancelled" || ev["demoted"] != false {
		t.Fatalf("attempt event: %v", ev)
	}
	st := d.status()
	counters := st["counters"].(map[string]any)
	if counters["upstream_failed"] != 0.0 || counters["cancelled"] != 1.0 {
		t.Errorf("counters: %v", counters)
	}
	for _, sc := range st["scopes"].([]any) {
		for _, sv := range sc.(map[string]any)["servers"].([]any) {
			if s := sv.(map[string]any); s["demoted"] != false {
				t.Errorf("server %v demoted after a client cancel", s)
			}
		}
	}
	if len(dropping.Queries()) != 1 {
		t.Errorf("upstream saw %d queries, want 1", len(dropping.Queries()))
	}
	out := runTool(t, binary, "status", "--admin", d.Admin)
	if !strings.Contains(out, "cancelled           1") && !strings.Contains(out, "cancelled") {
		t.Errorf("status table: %s", out)
	}
}
