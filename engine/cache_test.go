package engine_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/enginetest"
	"github.com/dohfwd/dohfwd/engine/memnet"
	"github.com/miekg/dns"
)

func soaText(ttl, minimum uint32) string {
	return fmt.Sprintf("example. %d IN SOA ns.example. hostmaster.example. 1 3600 600 86400 %d", ttl, minimum)
}

// negativeReply is NXDOMAIN (or NODATA for TXT) with a SOA whose TTL is
// 300 and MINIMUM 2.
var negativeReply = memnet.Reply{Msg: func(q *dns.Msg) *dns.Msg {
	m := new(dns.Msg).SetReply(q)
	if q.Question[0].Qtype != dns.TypeTXT {
		m.Rcode = dns.RcodeNameError
	}
	soa, _ := dns.NewRR(soaText(300, 2))
	m.Ns = append(m.Ns, soa)
	return m
}}

// The TTL served from the cache counts down with the time the entry has
// been kept (synctest's clock: no real waiting), and the entry goes when
// it reaches 0.
func TestCacheTTLCountsDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New()
		nw.Handle(cacheServer, memnet.Respond(memnet.Answer("@ 3 IN A 192.0.2.1")))
		e := startEngine(t, cacheConfig(engine.CacheConfig{}), nw)
		ask := func() enginetest.Response {
			return enginetest.Resolve(e, context.Background(), queryFor("ttl.example.", dns.TypeA))
		}

		r := ask()
		if r.Result != engine.ResultAnswer || r.CacheHit || r.Msg.Answer[0].Header().Ttl != 3 {
			t.Fatalf("first: %v hit %v answer %v; want the upstream's answer with TTL 3", r.Result, r.CacheHit, r.Msg.Answer)
		}
		time.Sleep(1100 * time.Millisecond)
		r = ask()
		if !r.CacheHit || r.Result != engine.ResultLocal || r.Attempts != 0 {
			t.Fatalf("after 1.1 s: hit %v result %v attempts %d; want a cache hit", r.CacheHit, r.Result, r.Attempts)
		}
		if ttl := r.Msg.Answer[0].Header().Ttl; ttl != 2 {
			t.Fatalf("after 1.1 s the TTL is %d, want 2", ttl)
		}
		if r.Msg.Id != 0xbeef {
			t.Fatalf("cache hit id %#x, want the client's", r.Msg.Id)
		}
		if n := len(nw.Transactions()); n != 1 {
			t.Fatalf("upstream saw %d queries, want 1", n)
		}
		time.Sleep(2 * time.Second) // 3.1 s: expired
		if r = ask(); r.CacheHit || len(nw.Transactions()) != 2 {
			t.Fatalf("after the TTL: hit %v, %d upstream queries; want the upstream asked again", r.CacheHit, len(nw.Transactions()))
		}
	})
}

// NXDOMAIN and NODATA are kept for the SOA's negative TTL (RFC 2308), and
// their SOA's TTL counts down as a positive answer's does.
func TestCacheNegative(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New()
		nw.Handle(cacheServer, memnet.Respond(negativeReply))
		e := startEngine(t, cacheConfig(engine.CacheConfig{}), nw)
		for _, qtype := range []uint16{dns.TypeA, dns.TypeTXT} { // NXDOMAIN, NODATA
			r := enginetest.Resolve(e, context.Background(), queryFor("missing.example.", qtype))
			if r.CacheHit || len(r.Msg.Ns) != 1 || r.Msg.Ns[0].Header().Ttl != 2 {
				t.Fatalf("%s first: hit %v authority %v; want the SOA with TTL min(300, 2) = 2", dns.TypeToString[qtype], r.CacheHit, r.Msg.Ns)
			}
		}
		time.Sleep(1100 * time.Millisecond)
		for _, qtype := range []uint16{dns.TypeA, dns.TypeTXT} {
			r := enginetest.Resolve(e, context.Background(), queryFor("missing.example.", qtype))
			if !r.CacheHit || r.Msg.Ns[0].Header().Ttl != 1 {
				t.Fatalf("%s after 1.1 s: hit %v authority %v; want a hit with the SOA at TTL 1", dns.TypeToString[qtype], r.CacheHit, r.Msg.Ns)
			}
			if want := map[uint16]int{dns.TypeA: dns.RcodeNameError, dns.TypeTXT: dns.RcodeSuccess}[qtype]; r.Msg.Rcode != want {
				t.Fatalf("%s from the cache: rcode %d, want %d", dns.TypeToString[qtype], r.Msg.Rcode, want)
			}
		}
		if n := len(nw.Transactions()); n != 2 {
			t.Fatalf("upstream saw %d queries, want 2", n)
		}
		time.Sleep(time.Second) // 2.1 s: both expired
		enginetest.Resolve(e, context.Background(), queryFor("missing.example.", dns.TypeA))
		if n := len(nw.Transactions()); n != 3 {
			t.Fatalf("upstream saw %d queries after the negative TTL, want 3", n)
		}
	})
}

// cacheServer is the memnet address of the server in the synctest cache tests.
var cacheServer = netip4(127, 0, 3, 1)

func cacheConfig(c engine.CacheConfig) engine.Config {
	if c.MaxEntries == 0 {
		c.MaxEntries = 1000
	}
	return engine.Config{FallbackServers: []string{cacheServer.String()}, Cache: c}
}

func TestCacheTTLClamps(t *testing.T) {
	cases := []struct {
		name    string
		conf    engine.CacheConfig
		reply   memnet.Reply
		section func(*dns.Msg) []dns.RR
		want    uint32 // the TTL served, and the entry's life in seconds
	}{
		{"min_ttl raises", engine.CacheConfig{MinTTL: time.Minute}, memnet.Answer("@ 5 IN A 192.0.2.1"), answerOf, 60},
		{"max_ttl caps", engine.CacheConfig{MaxTTL: 100 * time.Second}, memnet.Answer("@ 604800 IN A 192.0.2.1"), answerOf, 100},
		{"default max_ttl is a day", engine.CacheConfig{}, memnet.Answer("@ 604800 IN A 192.0.2.1"), answerOf, 86400},
		{"shortest record decides", engine.CacheConfig{}, memnet.Answer("@ 50 IN A 192.0.2.1", "@ 20 IN A 192.0.2.2"), answerOf, 20},
		{"negative_max_ttl caps", engine.CacheConfig{NegativeMaxTTL: 30 * time.Second}, nxWithSOA(soaText(7200, 3600)), authorityOf, 30},
		{"SOA TTL below MINIMUM", engine.CacheConfig{}, nxWithSOA(soaText(40, 3600)), authorityOf, 40},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				nw := memnet.New()
				nw.Handle(cacheServer, memnet.Respond(c.reply))
				e := startEngine(t, cacheConfig(c.conf), nw)
				ask := func() enginetest.Response {
					return enginetest.Resolve(e, context.Background(), queryFor("clamp.example.", dns.TypeA))
				}
				if got := minTTL(c.section(ask().Msg)); got != c.want {
					t.Fatalf("served TTL %d, want %d", got, c.want)
				}
				time.Sleep(time.Duration(c.want)*time.Second - time.Millisecond)
				if r := ask(); !r.CacheHit || minTTL(c.section(r.Msg)) != 1 {
					t.Fatalf("just before %d s: hit %v TTL %d; want a hit at TTL 1", c.want, r.CacheHit, minTTL(c.section(r.Msg)))
				}
				time.Sleep(time.Millisecond)
				if r := ask(); r.CacheHit {
					t.Fatalf("at %d s still a cache hit", c.want)
				}
			})
		})
	}
}

func TestCacheNeverKeepsFailures(t *testing.T) {
	for name, h := range map[string]memnet.Handler{
		"SERVFAIL":         memnet.Respond(memnet.Rcode(dns.RcodeServerFailure)),
		"timeouts":         memnet.Silent(),
		"NXDOMAIN w/o SOA": memnet.Respond(memnet.Rcode(dns.RcodeNameError)),
		"TTL 0":            memnet.Respond(memnet.Answer("@ 0 IN A 192.0.2.1")),
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				nw := memnet.New()
				nw.Handle(cacheServer, h)
				e := startEngine(t, cacheConfig(engine.CacheConfig{}), nw)
				enginetest.Resolve(e, context.Background(), queryFor("fail.example.", dns.TypeA))
				before := len(nw.Transactions())
				r := enginetest.Resolve(e, context.Background(), queryFor("fail.example.", dns.TypeA))
				if r.CacheHit || len(nw.Transactions()) == before {
					t.Fatalf("second question: hit %v, %d new transactions; want it asked upstream again", r.CacheHit, len(nw.Transactions())-before)
				}
			})
		})
	}
}

func TestCacheKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New()
		nw.Handle(cacheServer, memnet.Respond(memnet.Answer("@ 300 IN A 192.0.2.1")))
		e := startEngine(t, cacheConfig(engine.CacheConfig{}), nw)
		withDO := queryFor("key.example.", dns.TypeA)
		withDO.IsEdns0().SetDo()
		withCD := queryFor("key.example.", dns.TypeA)
		withCD.CheckingDisabled = true
		chaos := queryFor("key.example.", dns.TypeA)
		chaos.Question[0].Qclass = dns.ClassCHAOS
		noEDNS := new(dns.Msg)
		noEDNS.SetQuestion("KEY.example.", dns.TypeA)
		for i, c := range []struct {
			q   *dns.Msg
			hit bool
		}{
			{queryFor("key.example.", dns.TypeA), false},
			{queryFor("KeY.ExAmPlE.", dns.TypeA), true}, // names compare without case
			{noEDNS, true}, // EDNS itself is not in the key, DO is
			{queryFor("key.example.", dns.TypeAAAA), false},
			{withDO, false},
			{withCD, false},
			{chaos, false},
			{withDO, true},
			{withCD, true},
		} {
			r := enginetest.Resolve(e, context.Background(), c.q)
			if r.CacheHit != c.hit {
				t.Fatalf("question %d (%v, DO %v, CD %v): hit %v, want %v", i, c.q.Question[0], c.q.IsEdns0() != nil && c.q.IsEdns0().Do(), c.q.CheckingDisabled, r.CacheHit, c.hit)
			}
			if r.Msg.Question[0] != c.q.Question[0] {
				t.Fatalf("question %d: reply question %v, want the client's %v", i, r.Msg.Question[0], c.q.Question[0])
			}
			if (r.Msg.IsEdns0() != nil) != (c.q.IsEdns0() != nil) {
				t.Fatalf("question %d: OPT in reply %v, in query %v; want the same (RFC 6891)", i, r.Msg.IsEdns0() != nil, c.q.IsEdns0() != nil)
			}
		}
	})
}

func TestCacheCopyNotChangedByCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New()
		nw.Handle(cacheServer, memnet.Respond(memnet.Answer("@ 300 IN A 192.0.2.1")))
		e := startEngine(t, cacheConfig(engine.CacheConfig{}), nw)
		q := queryFor("copy.example.", dns.TypeA)
		enginetest.Resolve(e, context.Background(), q)
		// What a front end does to its reply: a new ID, padding, and
		// (a careless one) more records.
		r := enginetest.Resolve(e, context.Background(), q)
		r.Msg.Id = 1
		r.Msg.IsEdns0().Option = append(r.Msg.IsEdns0().Option, &dns.EDNS0_PADDING{Padding: make([]byte, 100)})
		r.Msg.Answer = append(r.Msg.Answer, r.Msg.Answer[0])
		r.Msg.Extra = append(r.Msg.Extra, r.Msg.Answer[0])
		r.Msg.Question[0].Name = "changed."

		again := enginetest.Resolve(e, context.Background(), q)
		if !again.CacheHit || again.Msg.Id != q.Id || len(again.Msg.Answer) != 1 || len(again.Msg.Extra) != 1 ||
			len(again.Msg.IsEdns0().Option) != 0 || again.Msg.Question[0].Name != "copy.example." {
			t.Fatalf("the next hit sees the last caller's changes: %v", again.Msg)
		}
	})
}

func TestCacheMaxEntriesBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New()
		nw.Handle(cacheServer, memnet.Respond(memnet.Answer("@ 300 IN A 192.0.2.1")))
		e := startEngine(t, cacheConfig(engine.CacheConfig{MaxEntries: 10}), nw)
		for i := range 500 {
			enginetest.Resolve(e, context.Background(), queryFor(fmt.Sprintf("n%d.example.", i), dns.TypeA))
		}
		hits := 0
		for i := range 500 {
			if enginetest.Resolve(e, context.Background(), queryFor(fmt.Sprintf("n%d.example.", i), dns.TypeA)).CacheHit {
				hits++
			}
		}
		// Otter may run a little over its bound between maintenance passes.
		if hits > 20 {
			t.Fatalf("%d of 500 names still cached with max_entries 10", hits)
		}
	})
}

func TestCacheOffWithZeroEntries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New()
		nw.Handle(cacheServer, memnet.Respond(memnet.Answer("@ 300 IN A 192.0.2.1")))
		cfg := cacheConfig(engine.CacheConfig{})
		cfg.Cache.MaxEntries = 0
		e := startEngine(t, cfg, nw)
		enginetest.Resolve(e, context.Background(), queryFor("off.example.", dns.TypeA))
		if r := enginetest.Resolve(e, context.Background(), queryFor("off.example.", dns.TypeA)); r.CacheHit || len(nw.Transactions()) != 2 {
			t.Fatalf("max_entries 0: hit %v, %d transactions; want no cache", r.CacheHit, len(nw.Transactions()))
		}
	})
}

// BenchmarkCacheHit measures a question answered by the engine from its
// cache: routing, the local-name check, the lookup and the client's reply.
func BenchmarkCacheHit(b *testing.B) {
	nw := memnet.New()
	nw.Handle(cacheServer, memnet.Respond(memnet.Answer("@ 3600 IN A 192.0.2.1")))
	cfg := cacheConfig(engine.CacheConfig{})
	cfg.Scopes = []engine.ScopeConfig{{Name: "corp", Domains: []string{"corp.example"}, Servers: []string{"127.0.3.2"}}}
	cfg.Hosts = map[string][]string{"router.lan": {"192.168.1.1"}}
	e, err := engine.New(cfg, engine.Options{Network: nw})
	if err != nil {
		b.Fatal(err)
	}
	q := queryFor("www.example.com.", dns.TypeA)
	if r := enginetest.Resolve(e, context.Background(), q); r.Result != engine.ResultAnswer {
		b.Fatalf("warming: %v", r.Result)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if r := enginetest.Resolve(e, ctx, q); !r.CacheHit {
			b.Fatal("not a cache hit")
		}
	}
}

func answerOf(m *dns.Msg) []dns.RR    { return m.Answer }
func authorityOf(m *dns.Msg) []dns.RR { return m.Ns }

func minTTL(rrs []dns.RR) uint32 {
	ttl := ^uint32(0)
	for _, rr := range rrs {
		ttl = min(ttl, rr.Header().Ttl)
	}
	return ttl
}

func nxWithSOA(soa string) memnet.Reply {
	return memnet.Edit(memnet.Rcode(dns.RcodeNameError), func(m *dns.Msg) {
		rr, _ := dns.NewRR(soa)
		m.Ns = append(m.Ns, rr)
	})
}

// A name asked often stays cached through a scan of names asked once
// (otter's W-TinyLFU admission), also when the cache tells otter of only
// some of its reads (answerCache.get): a cache that told it none would
// keep the scan's last names instead.
func TestCachePopularNamesSurviveAScan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New()
		nw.Handle(cacheServer, memnet.Respond(memnet.Answer("@ 300 IN A 192.0.2.1")))
		e := startEngine(t, cacheConfig(engine.CacheConfig{MaxEntries: 100}), nw)
		ask := func(name string) enginetest.Response {
			return enginetest.Resolve(e, context.Background(), queryFor(name, dns.TypeA))
		}
		const popular = 20
		// Past half full, so otter keeps frequencies.
		for i := range 60 {
			ask(fmt.Sprintf("fill%d.example.", i))
		}
		for i := range popular {
			ask(fmt.Sprintf("popular%d.example.", i))
		}
		for range 40 {
			for i := range popular {
				if r := ask(fmt.Sprintf("popular%d.example.", i)); !r.CacheHit {
					t.Fatalf("popular%d: not a hit before the scan", i)
				}
			}
		}
		for i := range 2000 {
			ask(fmt.Sprintf("scan%d.example.", i))
		}
		kept := 0
		for i := range popular {
			if ask(fmt.Sprintf("popular%d.example.", i)).CacheHit {
				kept++
			}
		}
		if kept < popular*9/10 {
			t.Fatalf("%d of %d popular names cached after a scan of 2000 names once each (max_entries 100)", kept, popular)
		}
	})
}
