package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/engine/upstreamtest"
)

// Serve-stale reaches every client whole, on every path a stale answer
// is made (RFC 8767): after the attempts are spent, by the client
// response timer, for a negative answer, and at the in-flight ceiling.
// Through DoH (GET and POST with Go's HTTP/2 client, the JSON form with
// curl), DoT (kdig) and plain DNS (dig), the stale answer carries EDE 3
// (Stale Answer), every record's TTL is cache.stale_ttl, and over DoH
// Cache-Control is max-age of that same TTL. The upstream answers with
// TTL 1, so the entries expire within the test, and then fails.

// staleTTL is cache.stale_ttl in these tests: unlike any TTL the upstream
// gives, so a record that kept its own shows.
const staleTTL = 7

// staleZoneSOA is the upstream's SOA for negative answers: TTL and
// MINIMUM 1, so the negative entry expires within the test and a max-age
// taken from MINIMUM shows.
const staleZoneSOA = "stale.test. 1 IN SOA ns.stale.test. host.stale.test. 1 3600 600 86400 1"

// staleUpstream is the programmable upstream of these tests: it answers
// until failing is set, then drops every query; it never answers a
// question for hold.stale.test. (the ceiling's holder).
type staleUpstream struct {
	*upstreamtest.Server
	failing atomic.Bool
}

func startStaleUpstream(t *testing.T) *staleUpstream {
	u := new(staleUpstream)
	u.Server = upstreamtest.Start(t, func(q upstreamtest.Query) upstreamtest.Action {
		if q.Msg == nil || len(q.Msg.Question) != 1 || u.failing.Load() {
			return upstreamtest.Action{}
		}
		qq := q.Msg.Question[0]
		var m *dns.Msg
		switch strings.ToLower(qq.Name) {
		case "hold.stale.test.":
			return upstreamtest.Action{}
		case "nx.stale.test.":
			m = upstreamtest.ReplyTo(q.Msg, dns.RcodeNameError)
		case "nodata.stale.test.":
			m = upstreamtest.ReplyTo(q.Msg, dns.RcodeSuccess)
		default:
			m = upstreamtest.ReplyTo(q.Msg, dns.RcodeSuccess, "@ 1 IN A 192.0.2.9", "@ 1 IN A 192.0.2.10")
		}
		if len(m.Answer) == 0 {
			soa, _ := dns.NewRR(staleZoneSOA)
			m.Ns = append(m.Ns, soa)
		}
		return upstreamtest.Action{Replies: []upstreamtest.Reply{{Msg: m}}}
	})
	return u
}

// startStaleDohfwd runs dohfwd on u with DoH, DoT and plain DNS listeners,
// cache.stale_ttl staleTTL and the engine and cache settings given (YAML
// lines under each key).
func startStaleDohfwd(t *testing.T, u *staleUpstream, engine, cache string) *dohfwd {
	yaml := strings.Replace(scopeYAML(u.String()), "listen:\n", "listen:\n  dot: 127.0.0.1:0\n  dns: 127.0.0.1:0\n", 1) +
		"engine:\n" + engine + fmt.Sprintf("cache:\n  stale_ttl: %ds\n", staleTTL) + cache
	return startDohfwd(t, yaml, newPKI(t))
}

// staleQuestion is one question these tests ask, and the answer it must
// get stale.
type staleQuestion struct {
	name  string
	qtype uint16
	rcode int
	// answers is the number of answer records, all A.
	answers int
}

var (
	staleA      = staleQuestion{"a.stale.test.", dns.TypeA, dns.RcodeSuccess, 2}
	staleNX     = staleQuestion{"nx.stale.test.", dns.TypeA, dns.RcodeNameError, 0}
	staleNoData = staleQuestion{"nodata.stale.test.", dns.TypeAAAA, dns.RcodeSuccess, 0}
)

// primeStale asks each question through DoH while the upstream answers,
// then waits until every answer (TTL 1) has expired and makes the
// upstream fail.
func (d *dohfwd) primeStale(u *staleUpstream, qs ...staleQuestion) {
	d.t.Helper()
	c := d.client()
	for _, q := range qs {
		if _, m := d.query(c, newQuery(q.name, q.qtype)); m == nil || m.Rcode != q.rcode {
			d.t.Fatalf("priming %s: %v", q.name, m)
		}
	}
	time.Sleep(1100 * time.Millisecond)
	u.failing.Store(true)
}

// staleSeen is one client's view of a stale answer: the DNS message as
// it read it, the EDE codes it saw, and (http) the Cache-Control of a DoH
// answer.
type staleSeen struct {
	how          string
	rcode        int
	answer, auth []dns.RR
	ede          []int
	cacheControl string
	http         bool
	// plain: the client sent no EDNS, so the answer carries no OPT
	// record and no EDE (RFC 6891 section 7); opt says whether it did.
	plain, opt bool
}

// checkStale asserts what every stale answer to q must be.
func checkStale(t *testing.T, q staleQuestion, s staleSeen) {
	t.Helper()
	if s.rcode != q.rcode || len(s.answer) != q.answers {
		t.Errorf("%s %s: rcode %d with %d answers, want %d with %d", s.how, q.name, s.rcode, len(s.answer), q.rcode, q.answers)
	}
	if s.plain {
		if s.opt {
			t.Errorf("%s %s: an OPT record in the answer to a query without EDNS", s.how, q.name)
		}
	} else if len(s.ede) != 1 || s.ede[0] != int(dns.ExtendedErrorCodeStaleAnswer) {
		t.Errorf("%s %s: EDE %v, want [3] (Stale Answer)", s.how, q.name, s.ede)
	}
	for _, rr := range append(append([]dns.RR(nil), s.answer...), s.auth...) {
		if rr.Header().Ttl != staleTTL {
			t.Errorf("%s %s: record TTL %d, want %d: %v", s.how, q.name, rr.Header().Ttl, staleTTL, rr)
		}
	}
	if q.answers == 0 {
		soa := false
		for _, rr := range s.auth {
			if rr.Header().Rrtype == dns.TypeSOA {
				soa = true
				if rr.Header().Ttl > staleTTL {
					t.Errorf("%s %s: SOA TTL %d, over %d", s.how, q.name, rr.Header().Ttl, staleTTL)
				}
			}
		}
		if !soa {
			t.Errorf("%s %s: negative answer without its SOA", s.how, q.name)
		}
	}
	if want := fmt.Sprintf("max-age=%d", staleTTL); s.http && s.cacheControl != want {
		t.Errorf("%s %s: Cache-Control %q, want %q", s.how, q.name, s.cacheControl, want)
	}
}

// edeCodes are the EDE info-codes of m.
func edeCodes(m *dns.Msg) []int {
	var codes []int
	if o := m.IsEdns0(); o != nil {
		for _, opt := range o.Option {
			if e, ok := opt.(*dns.EDNS0_EDE); ok {
				codes = append(codes, int(e.InfoCode))
			}
		}
	}
	return codes
}

func seenMsg(how string, m *dns.Msg, cacheControl string, http bool) staleSeen {
	return staleSeen{how: how, rcode: m.Rcode, answer: m.Answer, auth: m.Ns, ede: edeCodes(m), cacheControl: cacheControl, http: http,
		opt: m.IsEdns0() != nil}
}

// askStaleEverywhere asks q through every front end with its real client
// and checks each stale answer: seven questions.
func (d *dohfwd) askStaleEverywhere(q staleQuestion) {
	t := d.t
	t.Helper()
	c := d.client()
	query := func() *dns.Msg {
		m := newQuery(q.name, q.qtype)
		m.SetEdns0(1232, false)
		return m
	}

	// RFC 8484 GET and POST with Go's HTTP/2 client.
	wire, err := query().Pack()
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Get(d.URL() + "?dns=" + base64.RawURLEncoding.EncodeToString(wire))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	m := new(dns.Msg)
	if res.ProtoMajor != 2 || m.Unpack(body) != nil {
		t.Fatalf("GET %s: %s %d %q", q.name, res.Proto, res.StatusCode, body)
	}
	checkStale(t, q, seenMsg("DoH GET", m, res.Header.Get("Cache-Control"), true))

	res, m = d.query(c, query())
	if m == nil || res.ProtoMajor != 2 {
		t.Fatalf("POST %s: %s %d", q.name, res.Proto, res.StatusCode)
	}
	checkStale(t, q, seenMsg("DoH POST", m, res.Header.Get("Cache-Control"), true))
	// A client without EDNS: the same TTLs, no OPT record.
	res, m = d.query(c, newQuery(q.name, q.qtype))
	if m == nil {
		t.Fatalf("POST %s without EDNS: %d", q.name, res.StatusCode)
	}
	plain := seenMsg("DoH POST without EDNS", m, res.Header.Get("Cache-Control"), true)
	plain.plain = true
	checkStale(t, q, plain)

	// The JSON form with curl.
	dir := t.TempDir()
	hdrs := filepath.Join(dir, "headers")
	out := runTool(t, "curl", "-sS", "--fail", "--http2", "--max-time", "20", "--cacert", d.pki.CA, "-D", hdrs,
		fmt.Sprintf("https://%s/resolve?name=%s&type=%s", d.HTTPS, q.name, dns.TypeToString[q.qtype]))
	d.checkStaleJSON(q, out, hdrs)

	// kdig's DoH POST, padded (RFC 8467): the EDE ahead of the Padding
	// option.
	out = runTool(t, "kdig", append(d.digArgs("+https", "+padding", "+timeout=10", "+retry=0"), q.name, dns.TypeToString[q.qtype])...)
	checkStale(t, q, seenDigText(t, "DoH kdig +https", out))

	// DoT with kdig, plain DNS over UDP with dig.
	dot := d.listenerAddr("dot")
	host, port, _ := net.SplitHostPort(dot)
	out = runTool(t, "kdig", "@"+host, "-p", port, "+tls", "+tls-ca="+d.pki.CA, "+tls-hostname=localhost", "+edns",
		"+timeout=10", "+retry=0", q.name, dns.TypeToString[q.qtype])
	checkStale(t, q, seenDigText(t, "DoT kdig", out))
	host, port, _ = net.SplitHostPort(d.listenerAddr("dns-udp"))
	out = runTool(t, "dig", "@"+host, "-p", port, "+notcp", "+edns", "+timeout=10", "+tries=1",
		q.name, dns.TypeToString[q.qtype])
	checkStale(t, q, seenDigText(t, "Do53 dig", out))
}

// checkStaleJSON checks curl's JSON answer body and its header dump.
func (d *dohfwd) checkStaleJSON(q staleQuestion, body, headerFile string) {
	t := d.t
	t.Helper()
	type record struct {
		Name string `json:"name"`
		Type uint16 `json:"type"`
		TTL  uint32 `json:"TTL"`
		Data string `json:"data"`
	}
	var j struct {
		Status            int
		Answer, Authority []record
		Comment           string
	}
	if err := json.Unmarshal([]byte(body), &j); err != nil {
		t.Fatalf("JSON %s: %v: %s", q.name, err, body)
	}
	s := staleSeen{how: "DoH JSON (curl)", rcode: j.Status, http: true}
	conv := func(recs []record) []dns.RR {
		var rrs []dns.RR
		for _, r := range recs {
			rr, err := dns.NewRR(fmt.Sprintf("%s %d IN %s %s", r.Name, r.TTL, dns.TypeToString[r.Type], r.Data))
			if err != nil {
				t.Fatalf("JSON record %v: %v", r, err)
			}
			rrs = append(rrs, rr)
		}
		return rrs
	}
	s.answer, s.auth = conv(j.Answer), conv(j.Authority)
	if code, ok := strings.CutPrefix(j.Comment, "EDE "); ok {
		code, _, _ = strings.Cut(code, " ")
		if n, err := strconv.Atoi(code); err == nil {
			s.ede = append(s.ede, n)
		}
	}
	raw, err := os.ReadFile(headerFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(strings.ToLower(strings.TrimSpace(l)), "cache-control:"); ok {
			s.cacheControl = strings.TrimSpace(v)
		}
	}
	checkStale(t, q, s)
}

// seenDigText reads dig's or kdig's text output: the status, the EDE
// line and the records of the answer and authority sections.
func seenDigText(t *testing.T, how, out string) staleSeen {
	t.Helper()
	s := staleSeen{how: how, rcode: -1}
	section := ""
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		switch {
		case strings.Contains(l, "status: "):
			st := l[strings.Index(l, "status: ")+len("status: "):]
			st = strings.FieldsFunc(st, func(r rune) bool { return r == ',' || r == ';' || r == ' ' })[0]
			s.rcode = dns.StringToRcode[st]
		case strings.HasPrefix(l, ";") && strings.Contains(l, "EDE: "):
			f := strings.Fields(l[strings.Index(l, "EDE: ")+len("EDE: "):])
			if n, err := strconv.Atoi(strings.TrimSuffix(f[0], ":")); err == nil {
				s.ede = append(s.ede, n)
			}
		case strings.Contains(l, "SECTION:"):
			section = l
		case l == "" || strings.HasPrefix(l, ";"):
		default:
			rr, err := dns.NewRR(l)
			if err != nil || rr == nil {
				t.Fatalf("%s: record %q: %v\n%s", how, l, err, out)
			}
			switch {
			case strings.Contains(section, "ANSWER"):
				s.answer = append(s.answer, rr)
			case strings.Contains(section, "AUTHORITY"):
				s.auth = append(s.auth, rr)
			}
		}
	}
	if s.rcode < 0 {
		t.Fatalf("%s: no status:\n%s", how, out)
	}
	return s
}

// waitStaleEvents waits for n question events that answered stale for
// reason (the log is written after the answer), and fails the test when
// there are not exactly n.
func (d *dohfwd) waitStaleEvents(reason string, n int) {
	d.t.Helper()
	match := func(ev map[string]any) bool {
		return ev["message"] == "question" && ev["result"] == "stale" && ev["reason"] == reason
	}
	seen := 0
	d.waitEvent(10*time.Second, func(ev map[string]any) bool {
		if match(ev) {
			seen++
		}
		return seen == n
	})
	if got := len(d.Events(match)); got != n {
		d.t.Errorf("%d stale question events for %s, want %d", got, reason, n)
	}
}

// Attempts spent: the upstream drops every query once the answers have
// expired; with the client timer off, each front end's question spends
// its attempts and gets the stale answer.
func TestStaleAfterSpentAttemptsReachesEveryClient(t *testing.T) {
	t.Parallel()
	u := startStaleUpstream(t)
	d := startStaleDohfwd(t, u, "  transaction_timeout: 200ms\n  attempts: 2\n", "  stale_answer_after: 0s\n")
	d.primeStale(u, staleA)
	d.askStaleEverywhere(staleA)
	d.waitStaleEvents("attempts spent", 7)
}

// The client response timer (cache.stale_answer_after): the upstream
// drops every query and the attempt's timeout is far off; each front
// end's question gets the stale answer when the timer runs out.
func TestStaleByClientResponseTimerReachesEveryClient(t *testing.T) {
	t.Parallel()
	u := startStaleUpstream(t)
	d := startStaleDohfwd(t, u, "  transaction_timeout: 10s\n  attempts: 1\n", "  stale_answer_after: 300ms\n")
	d.primeStale(u, staleA)
	d.askStaleEverywhere(staleA)
	d.waitStaleEvents("client response timer", 7)
}

// NXDOMAIN and NODATA: the stale negative answer keeps its SOA, with
// every TTL stale_ttl (the SOA's MINIMUM of 1 does not lower the
// Cache-Control max-age below it).
func TestStaleNegativeAnswersReachEveryClient(t *testing.T) {
	t.Parallel()
	u := startStaleUpstream(t)
	d := startStaleDohfwd(t, u, "  transaction_timeout: 200ms\n  attempts: 1\n", "  stale_answer_after: 0s\n")
	d.primeStale(u, staleNX, staleNoData)
	d.askStaleEverywhere(staleNX)
	d.askStaleEverywhere(staleNoData)
	d.waitStaleEvents("attempts spent", 14)
}

// The in-flight ceiling: one question the upstream never answers holds
// the ceiling's only slot, so every other question is refused by it and
// answered from its stale entry at once.
func TestStaleAtInFlightCeilingReachesEveryClient(t *testing.T) {
	t.Parallel()
	u := startStaleUpstream(t)
	d := startStaleDohfwd(t, u, "  transaction_timeout: 30s\n  attempts: 1\n  in_flight_ceiling: 1\n", "  stale_answer_after: 0s\n")
	d.primeStale(u, staleA)

	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	wire, _ := newQuery("hold.stale.test", dns.TypeA).Pack()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.URL(), strings.NewReader(string(wire)))
	req.Header.Set("Content-Type", "application/dns-message")
	holder := d.client()
	go func() {
		if res, err := holder.Do(req); err == nil {
			res.Body.Close()
		}
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		held := false
		for _, q := range u.Queries() {
			held = held || q.Msg != nil && len(q.Msg.Question) == 1 && strings.EqualFold(q.Msg.Question[0].Name, "hold.stale.test.")
		}
		if held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the holding question did not reach the upstream")
		}
	}
	asked := len(u.Queries())
	d.askStaleEverywhere(staleA)
	d.waitStaleEvents("in-flight ceiling", 7)
	if n := len(u.Queries()); n != asked {
		t.Errorf("the upstream was asked %d more times past the ceiling", n-asked)
	}
}
