package assembly

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dohfwd/dohfwd/doh"
	"github.com/dohfwd/dohfwd/doh/config"
	"github.com/dohfwd/dohfwd/doh/internal/ddr"
	"github.com/dohfwd/dohfwd/doh/metrics"
	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
)

func testConfig(t *testing.T, servers ...*upstreamtest.Server) *config.Config {
	t.Helper()
	var list []string
	for _, s := range servers {
		list = append(list, fmt.Sprintf("%q", s.String()))
	}
	cfg, err := config.Parse("test.yaml", fmt.Appendf(nil, `scopes:
  - name: test
    default_route: true
    servers: [%s]
fallback_servers: []
cache:
  max_entries: 0
listen:
  trusted_proxies: ["10.0.0.0/8"]
log:
  level: error
`, strings.Join(list, ", ")))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func ask(t *testing.T, h http.Handler, name string) {
	t.Helper()
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), dns.TypeA)
	wire, _ := q.Pack()
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/dns-query?dns=" + base64.RawURLEncoding.EncodeToString(wire))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("HTTP %d", resp.StatusCode)
	}
}

// The native assembly counts each DoH request and each attempt's latency,
// and parses the trusted proxies.
func TestNativeAssemblyObservesRequestsAndAttempts(t *testing.T) {
	s := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.1"))
	met := metrics.NewMetrics()
	d, err := New(testConfig(t, s), Options{LogTo: io.Discard, Network: engine.NativeNetwork{}, Metrics: met})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.TrustedProxies) != 1 || d.TrustedProxies[0].String() != "10.0.0.0/8" {
		t.Errorf("trusted proxies %v", d.TrustedProxies)
	}
	ask(t, d.Handler, "one.example.org")
	if err := testutil.GatherAndCompare(met.Registry, strings.NewReader(wantRequests), "dohfwd_doh_requests_total"); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(met.Registry, "dohfwd_upstream_attempt_duration_seconds"); err != nil || n != 1 {
		t.Errorf("latency series: %d, %v; want 1", n, err)
	}
}

// A reload that drops a server forgets its latency series; the servers
// kept keep theirs.
func TestReloadForgetsRemovedServers(t *testing.T) {
	a := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.1"))
	b := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.2"))
	met := metrics.NewMetrics()
	d, err := New(testConfig(t, a), Options{LogTo: io.Discard, Network: engine.NativeNetwork{}, Metrics: met})
	if err != nil {
		t.Fatal(err)
	}
	ask(t, d.Handler, "one.example.org")
	backend := reloading{d.Engine, d}
	if err := backend.Reload(testConfig(t, a, b)); err != nil {
		t.Fatal(err)
	}
	if n, _ := testutil.GatherAndCount(met.Registry, "dohfwd_upstream_attempt_duration_seconds"); n != 1 {
		t.Fatalf("after a reload keeping the server: %d latency series, want 1", n)
	}
	if err := backend.Reload(testConfig(t, b)); err != nil {
		t.Fatal(err)
	}
	if n, _ := testutil.GatherAndCount(met.Registry, "dohfwd_upstream_attempt_duration_seconds"); n != 0 {
		t.Fatalf("after a reload dropping the server: %d latency series, want 0", n)
	}
}

// The assembly without a network builds no engine (the edge host), and a
// configuration the engine refuses is refused.
func TestAssemblyWithoutEngineAndRefusals(t *testing.T) {
	s := upstreamtest.Start(t, upstreamtest.Drop())
	d, err := New(testConfig(t, s), Options{LogTo: io.Discard})
	if err != nil || d.Engine != nil || d.Handler != nil {
		t.Fatalf("without a network: %+v, %v; want no engine", d, err)
	}
	cfg := testConfig(t, s)
	cfg.Log.Level = "loud"
	if _, err := New(cfg, Options{LogTo: io.Discard}); err == nil {
		t.Fatal("log level loud accepted")
	}
}

const wantRequests = `
# HELP dohfwd_doh_requests_total DoH requests answered, by HTTP version (proto: h2, h3, http/1.1), HTTP status and DNS rcode ("" when no DNS message was answered).
# TYPE dohfwd_doh_requests_total counter
dohfwd_doh_requests_total{proto="http/1.1",rcode="NOERROR",status="200"} 1
`

// The DoH handler's resolver (the engine behind DDR) answers bytes and
// can answer cache hits at once: the HTTP/2 server then answers them on
// the connection's goroutine. A wrapper added between them that drops
// ImmediateResolver would silently send every cache hit through a
// goroutine.
func TestDoHResolverAnswersBytesAndAtOnce(t *testing.T) {
	var r any = (*ddr.Resolver)(nil)
	if _, ok := r.(doh.Resolver); !ok {
		t.Error("ddr.Resolver is not a doh.Resolver")
	}
	if _, ok := r.(doh.ImmediateResolver); !ok {
		t.Error("ddr.Resolver is not a doh.ImmediateResolver")
	}
	var e any = (*engine.Engine)(nil)
	if _, ok := e.(doh.ImmediateResolver); !ok {
		t.Error("engine.Engine is not a doh.ImmediateResolver")
	}
}

// elsewhere is a resolver outside the assembly (the edge host's pool of
// module instances): it answers every query with an A record and notes
// the client the front end named.
type elsewhere struct {
	mu      sync.Mutex
	asked   int
	clients []netip.Addr
}

func (r *elsewhere) Resolve(ctx context.Context, query, dst []byte) engine.Response {
	r.mu.Lock()
	r.asked++
	r.clients = append(r.clients, engine.ClientOf(ctx))
	r.mu.Unlock()
	q := new(dns.Msg)
	if q.Unpack(query) != nil {
		return engine.Response{Wire: dst, Rcode: -1}
	}
	m := new(dns.Msg)
	m.SetReply(q)
	rr, _ := dns.NewRR(q.Question[0].Name + " 60 IN A 192.0.2.44")
	m.Answer = append(m.Answer, rr)
	wire, _ := m.Pack()
	return engine.Response{Wire: append(dst, wire...), TTL: 60, Cacheable: true, Result: engine.ResultAnswer, Attempts: 1}
}

// Over a resolver that lives elsewhere (Options.Resolver, no network),
// the assembly builds no engine but the same DoH front end as natively:
// the handler over that resolver, with the client limits (429 before the
// resolver is asked, the client named to it) and the observer.
func TestAssemblyOverAResolverElsewhere(t *testing.T) {
	cfg := testConfig(t)
	cfg.Limits.ClientQPS, cfg.Limits.ClientBurst = 0.01, 1
	met := metrics.NewMetrics()
	r := &elsewhere{}
	d, err := New(cfg, Options{LogTo: io.Discard, Metrics: met, Resolver: r})
	if err != nil {
		t.Fatal(err)
	}
	if d.Engine != nil || d.Resolver != nil || d.Handler == nil || d.Limits == nil {
		t.Fatalf("engine %v, DDR resolver %v, handler %v, limits %v: want only the handler and limits", d.Engine, d.Resolver, d.Handler, d.Limits)
	}
	ask(t, d.Handler, "one.example.org")
	if err := testutil.GatherAndCompare(met.Registry, strings.NewReader(wantRequests), "dohfwd_doh_requests_total"); err != nil {
		t.Error(err)
	}
	srv := httptest.NewServer(d.Handler)
	defer srv.Close()
	q := new(dns.Msg)
	q.SetQuestion("two.example.org.", dns.TypeA)
	wire, _ := q.Pack()
	resp, err := http.Get(srv.URL + "/dns-query?dns=" + base64.RawURLEncoding.EncodeToString(wire))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("second question over a burst of 1: HTTP %d, want 429", resp.StatusCode)
	}
	if r.asked != 1 || len(r.clients) != 1 || !r.clients[0].IsLoopback() {
		t.Fatalf("resolver asked %d times by clients %v; want once, naming the loopback client", r.asked, r.clients)
	}
}
