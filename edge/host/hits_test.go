package host

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/doh/config"
	"github.com/dohfwd/dohfwd/edge/abi"
	"github.com/dohfwd/dohfwd/edge/moduletest"
	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
)

// These tests run the real module under wazero with Options.NativeHits,
// real UDP to a programmable upstream on loopback, and put their
// questions to the pool as the DoH front end does (AnswerNow
// first, on the connection's goroutine).

var (
	hitsRuntimeOnce sync.Once
	hitsRT          *Runtime
	hitsRuntimeErr  error
)

// nativeHitsRuntime is the tests' runtime with NativeHits on.
func nativeHitsRuntime(t testing.TB) *Runtime {
	t.Helper()
	wasm, _ := moduletest.Build(t)
	hitsRuntimeOnce.Do(func() {
		hitsRT, hitsRuntimeErr = NewRuntime(context.Background(), wasm,
			Options{CacheDir: moduletest.CacheDir(t), Stderr: discardLog{}, NativeHits: true})
	})
	if hitsRuntimeErr != nil {
		t.Fatal(hitsRuntimeErr)
	}
	t.Cleanup(func() {}) // closed with the process (TestMain closes the shared one)
	return hitsRT
}

type discardLog struct{}

func (discardLog) Write(b []byte) (int, error) { return len(b), nil }

// zoneUpstream answers names starting "nx" NXDOMAIN with a SOA (TTL 300,
// MINIMUM 120), every other name an A record of ip with ttl.
func zoneUpstream(t *testing.T, ip string, ttl int) *upstreamtest.Server {
	return upstreamtest.Start(t, func(q upstreamtest.Query) upstreamtest.Action {
		if q.Msg == nil {
			return upstreamtest.Action{}
		}
		name := strings.ToLower(q.Msg.Question[0].Name)
		var m *dns.Msg
		if strings.HasPrefix(name, "nx") {
			m = upstreamtest.ReplyTo(q.Msg, dns.RcodeNameError)
			soa, _ := dns.NewRR("example.org. 300 IN SOA ns.example.org. hostmaster.example.org. 1 3600 600 86400 120")
			m.Ns = append(m.Ns, soa)
		} else {
			m = upstreamtest.ReplyTo(q.Msg, dns.RcodeSuccess, fmt.Sprintf("@ %d IN A %s", ttl, ip))
		}
		return upstreamtest.Action{Replies: []upstreamtest.Reply{{Msg: m}}}
	})
}

// cachedConfig is edgeConfig with the cache on.
func cachedConfig(servers ...*upstreamtest.Server) []byte {
	return bytes.Replace(edgeConfig(servers...), []byte("max_entries: 0"), []byte("max_entries: 1000"), 1)
}

func startHitsPool(t *testing.T, rt *Runtime, cfg []byte) *Pool {
	t.Helper()
	ctx := context.Background()
	p, err := NewPool(ctx, rt, cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(ctx) })
	return p
}

// frontAsk puts query to the pool as the DoH front end does.
func frontAsk(t *testing.T, p *Pool, query []byte) engine.Response {
	t.Helper()
	if r, ok := p.AnswerNow(query, nil, nil, nil); ok {
		return r
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := p.Resolve(ctx, query, nil)
	if len(r.Wire) == 0 {
		t.Fatalf("no reply: %+v", r)
	}
	return r
}

// nativeHits is how many questions the pool's mirror answered.
func nativeHits(p *Pool) uint64 { return p.hitCounters().CacheHits }

// warm asks query until the mirror answers it, and returns how many
// questions that took; it fails after max.
func warm(t *testing.T, p *Pool, query []byte, max int) int {
	t.Helper()
	before := nativeHits(p)
	for i := 1; i <= max; i++ {
		frontAsk(t, p, query)
		if nativeHits(p) > before {
			return i
		}
	}
	t.Fatalf("the mirror answered none of %d questions", max)
	return 0
}

func packed(t *testing.T, q *dns.Msg) []byte {
	t.Helper()
	b, err := q.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The mirror's reply to an entry is the module's reply to it at the same
// clock, byte for byte: the client's ID, RD bit and question case, the
// TTLs aged by the whole seconds since the module stored it, the OPT
// record for the client (its DO bit; none without EDNS), for an answer
// and for NXDOMAIN with its SOA; and the Response the front end reads.
// The module is asked through its dohfwd_ask between two mirror answers:
// when those two agree, the module's clock read the same age.
func TestWazeroNativeHitAnswersAsTheModule(t *testing.T) {
	t.Parallel()
	up := zoneUpstream(t, "192.0.2.7", 300)
	p := startHitsPool(t, nativeHitsRuntime(t), cachedConfig(up))
	shapes := []struct {
		name  string
		query func() *dns.Msg
	}{
		{"A with EDNS", func() *dns.Msg { q := query("a.example.org", dns.TypeA); q.SetEdns0(1232, false); return q }},
		{"A without EDNS", func() *dns.Msg { q := query("plain.example.org", dns.TypeA); q.RecursionDesired = false; return q }},
		{"NXDOMAIN with SOA", func() *dns.Msg { q := query("nx.example.org", dns.TypeA); q.SetEdns0(1232, false); return q }},
		{"DO bit", func() *dns.Msg { q := query("signed.example.org", dns.TypeAAAA); q.SetEdns0(4096, true); return q }},
	}
	for _, s := range shapes {
		warm(t, p, packed(t, s.query()), 40)
	}
	time.Sleep(1100 * time.Millisecond) // the TTLs age by a second
	in := p.pick()
	for _, s := range shapes {
		t.Run(s.name, func(t *testing.T) {
			q := s.query()
			q.Id = 0x5a5a
			q.Question[0].Name = alternateCase(q.Question[0].Name)
			wire := packed(t, q)
			for try := 0; ; try++ {
				first, ok := p.answerHit(wire, nil, nil)
				if !ok {
					t.Fatal("the mirror does not answer the warm entry")
				}
				mod, asked, ok, err := in.askNow(&abi.Query{Wire: wire}, nil, true)
				if err != nil || !asked || !ok {
					t.Fatalf("the module's dohfwd_ask: asked %v ok %v err %v", asked, ok, err)
				}
				second, _ := p.answerHit(wire, nil, nil)
				if !bytes.Equal(first.Wire, second.Wire) {
					if try < 3 {
						continue // a second boundary passed between them
					}
					t.Fatal("the mirror's replies changed within every try")
				}
				if !bytes.Equal(first.Wire, mod.Wire) {
					t.Fatalf("the mirror's reply differs from the module's:\nmirror %x\nmodule %x", first.Wire, mod.Wire)
				}
				if first.Rcode != mod.Rcode || first.TTL != mod.TTL || first.Cacheable != mod.Cacheable || first.Result != mod.Result ||
					first.CacheHit != mod.CacheHit || !first.CacheHit || first.QName != mod.QName || first.Scope != mod.Scope || first.Attempts != 0 {
					t.Fatalf("mirror response %+v, module's %+v", first, mod)
				}
				m := new(dns.Msg)
				if err := m.Unpack(first.Wire); err != nil || m.Id != 0x5a5a || m.Question[0].Name != q.Question[0].Name ||
					m.RecursionDesired != q.RecursionDesired || (q.IsEdns0() == nil) != (m.IsEdns0() == nil) ||
					(q.IsEdns0() != nil && q.IsEdns0().Do() != m.IsEdns0().Do()) {
					t.Fatalf("reply %v (%v) to\n%v", m, err, q)
				}
				return
			}
		})
	}
	if n := len(up.Queries()); n != len(shapes) {
		t.Fatalf("the upstream saw %d queries, want %d (one per name)", n, len(shapes))
	}
}

// An entry is published only once a hit on it is a pure read of the
// module's state (its reads reached the cache policy's count), and the
// mirror serves it to its TTL, not past it: the question after goes to the
// module, which asks upstream again.
func TestWazeroNativeHitOnlyWhenHotAndFresh(t *testing.T) {
	t.Parallel()
	up := zoneUpstream(t, "192.0.2.8", 3)
	p := startHitsPool(t, nativeHitsRuntime(t), cachedConfig(up))
	wire := packed(t, query("hot.example.org", dns.TypeA))
	n := warm(t, p, wire, 40)
	// The miss, then the module's 16 reads (engine policyReads): the
	// 16th publishes.
	if n < 17 {
		t.Fatalf("the mirror answered question %d: before the entry was hot", n)
	}
	if got := len(up.Queries()); got != 1 {
		t.Fatalf("the upstream saw %d queries while warm, want 1", got)
	}
	time.Sleep(3 * time.Second) // the TTL
	before := nativeHits(p)
	r := frontAsk(t, p, wire)
	if nativeHits(p) != before {
		t.Fatal("the mirror answered an expired entry")
	}
	if r.CacheHit || len(up.Queries()) != 2 {
		t.Fatalf("after the TTL: cache hit %v, %d upstream queries; want the module to ask again", r.CacheHit, len(up.Queries()))
	}
}

// The mirror's hits are the pool's: Status and Counters add them to the
// module's, as questions answered locally from the cache.
func TestWazeroNativeHitsCountInPoolStatus(t *testing.T) {
	t.Parallel()
	up := zoneUpstream(t, "192.0.2.9", 300)
	p := startHitsPool(t, nativeHitsRuntime(t), cachedConfig(up))
	wire := packed(t, query("counted.example.org", dns.TypeA))
	warm(t, p, wire, 40)
	before, mirrorBefore := p.Counters(), nativeHits(p)
	const n = 50
	for range n {
		frontAsk(t, p, wire)
	}
	if got := nativeHits(p) - mirrorBefore; got != n {
		t.Fatalf("the mirror answered %d of %d", got, n)
	}
	after := p.Counters()
	if d := after.CacheHits - before.CacheHits; d != n {
		t.Fatalf("Status' cache hits went up by %d, want %d", d, n)
	}
	if d := after.Questions[engine.ResultLocal.String()] - before.Questions[engine.ResultLocal.String()]; d != n {
		t.Fatalf("Status' local answers went up by %d, want %d (%+v)", d, n, after.Questions)
	}
}

// A reload that routes the name to other servers stops the mirror's
// answers at once: the question goes to the module, which asks the new
// server, and the mirror serves the new answer once hot again.
func TestWazeroReloadThatReroutesStopsNativeHits(t *testing.T) {
	t.Parallel()
	oldUp, newUp := zoneUpstream(t, "192.0.2.10", 300), zoneUpstream(t, "192.0.2.11", 300)
	yaml := cachedConfig(oldUp)
	p := startHitsPool(t, nativeHitsRuntime(t), yaml)
	wire := packed(t, query("moved.example.org", dns.TypeA))
	warm(t, p, wire, 40)
	rerouted := bytes.Replace(yaml, []byte("fallback_servers: []"), fmt.Appendf(nil, `  - name: moved
    domains: [moved.example.org]
    servers: [%q]
fallback_servers: []`, newUp.String()), 1)
	cfg, err := config.Parse("edge.yaml", rerouted)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	before := nativeHits(p)
	m := new(dns.Msg)
	r := frontAsk(t, p, wire)
	if err := m.Unpack(r.Wire); err != nil || len(m.Answer) != 1 || m.Answer[0].(*dns.A).A.String() != "192.0.2.11" {
		t.Fatalf("after the reload: %v (%v); want the new server's answer", m, err)
	}
	if nativeHits(p) != before || r.Scope != "moved" || len(newUp.Queries()) != 1 {
		t.Fatalf("after the reload: mirror hits +%d, scope %q, new server asked %d times; want the module to ask the new scope",
			nativeHits(p)-before, r.Scope, len(newUp.Queries()))
	}
	warm(t, p, wire, 40)
	r = frontAsk(t, p, wire)
	if err := m.Unpack(r.Wire); err != nil || m.Answer[0].(*dns.A).A.String() != "192.0.2.11" || r.Scope != "moved" {
		t.Fatalf("the mirror's answer after the reload: %v scope %q", m, r.Scope)
	}
}

// Without NativeHits (dohfwd-edge -native-hits=false) the module
// publishes nothing and answers every hit itself.
func TestWazeroNativeHitsOff(t *testing.T) {
	t.Parallel()
	up := zoneUpstream(t, "192.0.2.12", 300)
	p := startHitsPool(t, testRuntime(t), cachedConfig(up))
	if p.hits != nil {
		t.Fatal("a pool without NativeHits has a mirror")
	}
	wire := packed(t, query("off.example.org", dns.TypeA))
	frontAsk(t, p, wire)
	before := p.Counters().CacheHits
	in := p.pick()
	asked := in.askedNow.Load()
	const n = 40
	for range n {
		if r := frontAsk(t, p, wire); !r.CacheHit {
			t.Fatalf("not a hit: %+v", r)
		}
	}
	if d := p.Counters().CacheHits - before; d != n {
		t.Fatalf("cache hits +%d, want %d", d, n)
	}
	if d := in.askedNow.Load() - asked; d != n {
		t.Fatalf("the module answered %d of %d hits at once (dohfwd_ask), want all", d, n)
	}
}

// alternateCase upper-cases every other letter of name.
func alternateCase(name string) string {
	b := []byte(name)
	for i := 0; i < len(b); i += 2 {
		if b[i] >= 'a' && b[i] <= 'z' {
			b[i] -= 'a' - 'A'
		}
	}
	return string(b)
}

// A hit record the host cannot read (a module of another version) is
// counted and the first is logged at warn on the host's log, with its
// error; the next ones are counted alone. Not parallel: the log level is
// zerolog's global one.
func TestNativeHitsWarnOfTheFirstRejectedRecord(t *testing.T) {
	encoded, err := encodeYAML([]byte("fallback_servers: [\"192.0.2.53:53\"]\ncache:\n  max_entries: 100\nlog:\n  level: warn\n"))
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	h, err := newHotEntries(encoded, &log)
	if err != nil {
		t.Fatal(err)
	}
	record := make([]byte, 64)
	record[0] = 99 // a record version this host does not know
	h.take(abi.AppendHitRecord(nil, record))
	h.take(abi.AppendHitRecord(nil, record))
	h.take([]byte{0xff}) // a field that does not read
	if n := h.rejected.Load(); n != 3 {
		t.Fatalf("%d records rejected, want 3", n)
	}
	lines := strings.Split(strings.TrimSpace(log.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], `"level":"warn"`) || !strings.Contains(lines[0], "hit record") ||
		!strings.Contains(lines[0], "version 99") {
		t.Fatalf("log:\n%s\nwant one warning, with the first record's error", log.String())
	}
}
