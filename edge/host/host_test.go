package host

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/doh"
	"github.com/dohfwd/dohfwd/doh/assembly"
	cfgpkg "github.com/dohfwd/dohfwd/doh/config"
	"github.com/dohfwd/dohfwd/edge/moduletest"
	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
)

// These tests run the real module (built from edge/module) under wazero,
// with real UDP and TCP sockets to programmable upstreams on loopback, and
// real HTTP/2 over TLS from the client. Each test has its own pool of one
// instance, so the engine state it sees (marks) is its own.

var (
	runtimeOnce sync.Once
	sharedRT    *Runtime
	runtimeErr  error
)

func testRuntime(t testing.TB) *Runtime {
	t.Helper()
	wasm, _ := moduletest.Build(t)
	runtimeOnce.Do(func() {
		sharedRT, runtimeErr = NewRuntime(context.Background(), wasm, Options{CacheDir: moduletest.CacheDir(t), Stderr: io.Discard})
	})
	if runtimeErr != nil {
		t.Fatal(runtimeErr)
	}
	return sharedRT
}

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedRT != nil {
		sharedRT.Close(context.Background())
	}
	os.Exit(code)
}

// edgeConfig is the server's YAML with one default-route scope over servers.
func edgeConfig(servers ...*upstreamtest.Server) []byte {
	var list []string
	for _, s := range servers {
		list = append(list, fmt.Sprintf("%q", s.String()))
	}
	return fmt.Appendf(nil, `scopes:
  - name: test
    default_route: true
    servers: [%s]
fallback_servers: []
cache:
  max_entries: 0
log:
  level: error
`, strings.Join(list, ", "))
}

type edge struct {
	pool   *Pool
	d      *assembly.Dohfwd // the host's assembly: its front end over the pool
	srv    *doh.Server
	url    string
	client *http.Client
}

// startEdge serves DoH through a pool of size instances over HTTP/2 + TLS,
// as dohfwd-edge does: the native front end (package assembly's DoH
// handler over the pool, served by package doh's own server) hands the
// module questions.
func startEdge(t *testing.T, config []byte, size int) *edge {
	t.Helper()
	return startEdgeWith(t, config, size, assembly.Options{LogTo: io.Discard}, nil)
}

// startEdgeWith is startEdge with the assembly's options (Resolver is the
// pool), or, with whole set, serving whole requests through the module's
// own DoH handler (the Workers glue's way: Handler, doh.HandlerFor) with
// whole's observer.
func startEdgeWith(t *testing.T, config []byte, size int, o assembly.Options, whole *Handler) *edge {
	t.Helper()
	return startEdgeOn(t, testRuntime(t), config, size, o, whole)
}

// startEdgeOn is startEdgeWith on a runtime of the test's own.
func startEdgeOn(t *testing.T, rt *Runtime, config []byte, size int, o assembly.Options, whole *Handler) *edge {
	t.Helper()
	ctx := context.Background()
	pool, err := NewPool(ctx, rt, config, size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close(ctx) })
	cfg, err := cfgpkg.Parse("edge.yaml", config)
	if err != nil {
		t.Fatal(err)
	}
	o.Resolver = pool
	d, err := assembly.New(cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	handler := d.Handler
	if whole != nil {
		whole.Pool = pool
		handler = doh.HandlerFor(*whole)
	}
	cert := httptest.NewUnstartedServer(nil) // for its certificate and a client that trusts it
	cert.EnableHTTP2 = true
	cert.StartTLS()
	client := cert.Client()
	tlsConfig := &tls.Config{Certificates: cert.TLS.Certificates}
	cert.Close()
	srv, err := doh.NewTLSServer(handler, tlsConfig, doh.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close(); client.CloseIdleConnections() })
	return &edge{pool: pool, d: d, srv: srv, url: "https://" + ln.Addr().String(), client: client}
}

func query(name string, qtype uint16) *dns.Msg {
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), qtype)
	q.Id = 0 // RFC 8484: cache-friendly ID
	return q
}

// get asks q with RFC 8484 GET and returns the HTTP response's DNS message.
func (e *edge) get(t *testing.T, q *dns.Msg) (*dns.Msg, *http.Response) {
	t.Helper()
	wire, err := q.Pack()
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", e.url+"/dns-query?dns="+base64.RawURLEncoding.EncodeToString(wire), nil)
	req.Header.Set("Accept", "application/dns-message")
	return e.do(t, req)
}

// post asks q with RFC 8484 POST.
func (e *edge) post(t *testing.T, q *dns.Msg) (*dns.Msg, *http.Response) {
	t.Helper()
	wire, err := q.Pack()
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", e.url+"/dns-query", bytes.NewReader(wire))
	req.Header.Set("Content-Type", "application/dns-message")
	return e.do(t, req)
}

func (e *edge) do(t *testing.T, req *http.Request) (*dns.Msg, *http.Response) {
	t.Helper()
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("HTTP %d: %s", resp.StatusCode, body)
	}
	if resp.ProtoMajor != 2 {
		t.Fatalf("want HTTP/2, got %s", resp.Proto)
	}
	m := new(dns.Msg)
	if err := m.Unpack(body); err != nil {
		t.Fatalf("response body is not a DNS message: %v", err)
	}
	return m, resp
}

func (e *edge) status(t *testing.T) engine.Status {
	t.Helper()
	st, err := e.pool.Statuses(context.Background())
	if err != nil || len(st) != 1 {
		t.Fatalf("status: %v %v", st, err)
	}
	return st[0]
}

func wantAnswer(t *testing.T, m *dns.Msg, ip string) {
	t.Helper()
	if m.Rcode != dns.RcodeSuccess || len(m.Answer) == 0 {
		t.Fatalf("want an answer, got\n%v", m)
	}
	if a, ok := m.Answer[0].(*dns.A); !ok || a.A.String() != ip {
		t.Fatalf("want A %s, got %v", ip, m.Answer[0])
	}
}

// servers lists the server and transport of each query an upstream read.
func transports(s *upstreamtest.Server) []string {
	var out []string
	for _, q := range s.Queries() {
		out = append(out, q.Transport)
	}
	return out
}

func TestWazeroDoHOverUDP(t *testing.T) {
	t.Parallel()
	up := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.1"))
	e := startEdge(t, edgeConfig(up), 1)

	m, resp := e.get(t, query("www.example.org", dns.TypeA))
	wantAnswer(t, m, "192.0.2.1")
	if ct := resp.Header.Get("Content-Type"); ct != "application/dns-message" {
		t.Errorf("content-type %q", ct)
	}
	m, _ = e.post(t, query("mail.example.org", dns.TypeA))
	wantAnswer(t, m, "192.0.2.1")
	if m.Question[0].Name != "mail.example.org." {
		t.Errorf("question %v", m.Question)
	}

	qs := up.Queries()
	if got := transports(up); len(got) != 2 || got[0] != "udp" || got[1] != "udp" {
		t.Fatalf("upstream transports %v, want [udp udp]", got)
	}
	// The upstream saw the engine's query, not the client's: a random ID
	// and EDNS0 at 1232 bytes.
	if o := qs[0].Msg.IsEdns0(); o == nil || o.UDPSize() != 1232 {
		t.Errorf("upstream query lacks EDNS0 1232: %v", qs[0].Msg)
	}
}

// engine-servers.tcp-retry-spends-an-attempt: a truncated UDP reply makes
// the module retry over TCP to the same server, spending a second attempt.
func TestWazeroTruncatedThenTCP(t *testing.T) {
	t.Parallel()
	tc := func(q upstreamtest.Query) upstreamtest.Action {
		m := upstreamtest.ReplyTo(q.Msg, dns.RcodeSuccess)
		m.Truncated = true
		return upstreamtest.Action{Replies: []upstreamtest.Reply{{Msg: m}}}
	}
	var big []string
	for i := range 20 {
		big = append(big, fmt.Sprintf("@ 60 IN TXT %q", strings.Repeat(string(rune('a'+i)), 200)))
	}
	up := upstreamtest.Start(t, upstreamtest.ByTransport(tc, upstreamtest.Answer(big...)))
	e := startEdge(t, edgeConfig(up), 1)

	m, _ := e.post(t, query("big.example.org", dns.TypeTXT))
	if m.Rcode != dns.RcodeSuccess || len(m.Answer) != 20 {
		t.Fatalf("want 20 TXT records over TCP, got rcode %d, %d records", m.Rcode, len(m.Answer))
	}
	if got := transports(up); len(got) != 2 || got[0] != "udp" || got[1] != "tcp" {
		t.Fatalf("upstream transports %v, want [udp tcp]", got)
	}
	c := e.status(t).Counters
	if c.Attempts["truncated"] != 1 || c.Attempts["answer"] != 1 {
		t.Fatalf("attempts %v: want one truncated, one answer", c.Attempts)
	}
}

// engine-servers.server-choice-rule, engine-servers.transaction-timeout,
// engine-servers.timeout-fails-attempt: the first attempt goes to the first
// server; it drops the query, so after the 2 s transaction timeout the
// second attempt goes to the second server.
//
// engine-servers.healthy-first-then-demoted: the next question, on the
// same instance, goes to the second server first, because the first is
// demoted.
func TestWazeroDroppingFirstServer(t *testing.T) {
	t.Parallel()
	s1 := upstreamtest.Start(t, upstreamtest.Drop())
	s2 := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.2"))
	e := startEdge(t, edgeConfig(s1, s2), 1)

	start := time.Now()
	m, _ := e.get(t, query("one.example.org", dns.TypeA))
	wantAnswer(t, m, "192.0.2.2")
	gap := wantMovedAtTimeout(t, s1, s2)
	t.Logf("moved to the second server after %v (question took %v)", gap, time.Since(start))

	st := e.status(t)
	if srv := st.Scopes[0].Servers; !srv[0].Demoted || srv[1].Demoted {
		t.Fatalf("status %+v: want the first server demoted, the second not", srv)
	}
	if st.Counters.Attempts["timeout"] != 1 || st.Counters.UpstreamFailed != 1 {
		t.Fatalf("counters %+v", st.Counters)
	}

	// Demotion order: the next question asks the healthy server first.
	m, _ = e.post(t, query("two.example.org", dns.TypeA))
	wantAnswer(t, m, "192.0.2.2")
	if len(s1.Queries()) != 1 || len(s2.Queries()) != 2 {
		t.Fatalf("second question: first server asked %d times, second %d; want 1 and 2",
			len(s1.Queries()), len(s2.Queries()))
	}
}

// engine-servers.failure-rcodes-fail-attempt: a SERVFAIL fails the attempt
// at once (no waiting for the timeout) and demotes the server; the next
// attempt goes to the second server.
func TestWazeroServfailFailsFast(t *testing.T) {
	t.Parallel()
	s1 := upstreamtest.Start(t, upstreamtest.Rcode(dns.RcodeServerFailure))
	s2 := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.2"))
	e := startEdge(t, edgeConfig(s1, s2), 1)

	m, _ := e.get(t, query("fast.example.org", dns.TypeA))
	wantAnswer(t, m, "192.0.2.2")
	q1, q2 := s1.Queries(), s2.Queries()
	if len(q1) != 1 || len(q2) != 1 {
		t.Fatalf("queries: %d and %d, want 1 and 1", len(q1), len(q2))
	}
	if gap := q2[0].At.Sub(q1[0].At); gap >= time.Second {
		t.Fatalf("second server asked %v after a SERVFAIL; want at once, well before the 2 s timeout", gap)
	}
	st := e.status(t)
	if !st.Scopes[0].Servers[0].Demoted || st.Counters.Attempts["rcode"] != 1 {
		t.Fatalf("want the SERVFAIL server demoted and one rcode attempt: %+v %+v", st.Scopes[0].Servers, st.Counters.Attempts)
	}
}

// engine-servers.third-failure-is-unavailable,
// engine-servers.attempts-per-candidate, engine-servers.server-choice-rule:
// with both servers dropping, three attempts go first, second, first; the
// client gets SERVFAIL with EDE 22 (No Reachable Authority).
func TestWazeroAttemptOrderBothDropping(t *testing.T) {
	t.Parallel()
	s1 := upstreamtest.Start(t, upstreamtest.Drop())
	s2 := upstreamtest.Start(t, upstreamtest.Drop())
	e := startEdge(t, edgeConfig(s1, s2), 1)

	m, resp := e.get(t, query("gone.example.org", dns.TypeA))
	if m.Rcode != dns.RcodeServerFailure {
		t.Fatalf("rcode %s, want SERVFAIL", dns.RcodeToString[m.Rcode])
	}
	if !hasEDE(m, dns.ExtendedErrorCodeNoReachableAuthority) {
		t.Fatalf("want EDE 22 in\n%v", m)
	}
	if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control %q, want no-store", cc)
	}
	if len(s1.Queries()) != 2 || len(s2.Queries()) != 1 {
		t.Fatalf("first server asked %d times, second %d; want 2 and 1 (order first, second, first)",
			len(s1.Queries()), len(s2.Queries()))
	}
	if a, b := s1.Queries()[0].At, s2.Queries()[0].At; !a.Before(b) || !b.Before(s1.Queries()[1].At) {
		t.Fatalf("want the order first, second, first; got first at %v and %v, second at %v", a, s1.Queries()[1].At, b)
	}
}

// A reply that does not match the transaction (wrong ID) is ignored and
// counted; the transaction keeps waiting and takes the matching reply that
// follows, so no second attempt is made.
func TestWazeroMismatchedReplyIgnored(t *testing.T) {
	t.Parallel()
	spoof := func(q upstreamtest.Query) upstreamtest.Action {
		wrong := upstreamtest.ReplyTo(q.Msg, dns.RcodeSuccess, "@ 60 IN A 198.51.100.66")
		wrong.Id ^= 0x5a5a
		right := upstreamtest.ReplyTo(q.Msg, dns.RcodeSuccess, "@ 60 IN A 192.0.2.1")
		return upstreamtest.Action{Replies: []upstreamtest.Reply{
			{Msg: wrong},
			{Raw: []byte("not a DNS message")},
			{Msg: right, Delay: 200 * time.Millisecond},
		}}
	}
	s1 := upstreamtest.Start(t, spoof)
	s2 := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.2"))
	e := startEdge(t, edgeConfig(s1, s2), 1)

	m, _ := e.get(t, query("spoof.example.org", dns.TypeA))
	wantAnswer(t, m, "192.0.2.1")
	if len(s2.Queries()) != 0 {
		t.Fatalf("the second server was asked: a mismatched reply must not end the attempt")
	}
	c := e.status(t).Counters
	if c.MismatchedReplies != 2 || c.Attempts["answer"] != 1 {
		t.Fatalf("mismatched_replies %d (want 2: wrong ID and garbage), attempts %v", c.MismatchedReplies, c.Attempts)
	}
}

// A matching reply that arrives right behind a mismatched one (both may
// come with one wake-up of the socket's waiter, udp.go) is read when the
// module asks again, not left unread until the attempt's 2 s timeout:
// the question is answered by its first attempt, at once.
func TestWazeroReplyQueuedBehindMismatch(t *testing.T) {
	t.Parallel()
	spoof := func(q upstreamtest.Query) upstreamtest.Action {
		wrong := upstreamtest.ReplyTo(q.Msg, dns.RcodeSuccess, "@ 60 IN A 198.51.100.66")
		wrong.Id ^= 0x5a5a
		right := upstreamtest.ReplyTo(q.Msg, dns.RcodeSuccess, "@ 60 IN A 192.0.2.1")
		return upstreamtest.Action{Replies: []upstreamtest.Reply{{Msg: wrong}, {Msg: wrong}, {Msg: right}}}
	}
	s1 := upstreamtest.Start(t, spoof)
	s2 := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.2"))
	e := startEdge(t, edgeConfig(s1, s2), 1)

	for i := range 20 {
		m, _ := e.get(t, query(fmt.Sprintf("q%d.queued.example.org", i), dns.TypeA))
		wantAnswer(t, m, "192.0.2.1")
	}
	if len(s2.Queries()) != 0 {
		t.Fatalf("the second server was asked: a reply queued behind a mismatched one was not read")
	}
	c := e.status(t).Counters
	if c.MismatchedReplies != 40 || c.Attempts["answer"] != 20 {
		t.Fatalf("mismatched_replies %d (want 40), attempts %v (want 20 answer)", c.MismatchedReplies, c.Attempts)
	}
}

func hasEDE(m *dns.Msg, code uint16) bool {
	if o := m.IsEdns0(); o != nil {
		for _, opt := range o.Option {
			if e, ok := opt.(*dns.EDNS0_EDE); ok && e.InfoCode == code {
				return true
			}
		}
	}
	return false
}

// wantMovedAtTimeout checks that one question asked the dropping first
// server once and the second once, no sooner than the first's 2 s
// transaction timeout, and returns the gap. There is no upper bound (a
// loaded machine may add seconds): one query to each server says it
// moved on at its first timeout.
func wantMovedAtTimeout(t *testing.T, first, second *upstreamtest.Server) time.Duration {
	t.Helper()
	q1, q2 := first.Queries(), second.Queries()
	if len(q1) != 1 || len(q2) != 1 {
		t.Fatalf("queries: first server %d, second %d; want 1 and 1", len(q1), len(q2))
	}
	gap := q2[0].At.Sub(q1[0].At)
	if gap < 1900*time.Millisecond {
		t.Fatalf("second server asked %v after the first; want the 2 s transaction timeout", gap)
	}
	return gap
}
