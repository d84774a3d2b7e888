package engine_test

import (
	"bytes"
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/memnet"
	"github.com/miekg/dns"
)

// mirrored is an engine that publishes its hot entries to a mirror, as
// the edge module and its host do, over memnet (build it in a bubble).
type mirrored struct {
	t      *testing.T
	nw     *memnet.Network
	e      *engine.Engine
	m      *engine.HotEntries
	events *eventLog
	// published counts the records the engine handed out.
	published int
}

func newMirrored(t *testing.T, cfg engine.Config, h memnet.Handler) *mirrored {
	t.Helper()
	x := &mirrored{t: t, nw: memnet.New(), events: &eventLog{}}
	x.nw.Handle(cacheServer, h)
	x.e = startEngine(t, cfg, x.nw)
	m, err := engine.NewHotEntries(cfg, x.events)
	if err != nil {
		t.Fatalf("NewHotEntries: %v", err)
	}
	x.m = m
	x.e.PublishHotEntries(func(rec []byte) {
		x.published++
		if err := x.m.Publish(rec); err != nil {
			t.Errorf("Publish: %v", err)
		}
	})
	return x
}

func pack(t *testing.T, q *dns.Msg) []byte {
	t.Helper()
	b, err := q.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// engineAnswer asks the engine (at once, else by Resolve).
func (x *mirrored) engineAnswer(query []byte) engine.Response {
	if r, ok := x.e.AnswerNow(query, nil, nil, nil); ok {
		return r
	}
	return x.e.Resolve(context.Background(), query, nil)
}

// mirrorAnswer asks the mirror.
func (x *mirrored) mirrorAnswer(query []byte) (engine.Response, bool) {
	return x.m.AnswerNow(query, nil, nil, nil)
}

// The mirror's reply to a published entry is the engine's reply, byte for
// byte, at the same clock (synctest's): the client's ID, RD bit and
// question case, the TTLs aged, the OPT record for the client (DO, none
// without EDNS), for an answer and for NXDOMAIN with its SOA; and its
// Response and counters are the engine's for a hit.
func TestHotEntriesAnswersAsTheEngine(t *testing.T) {
	shapes := []struct {
		name  string
		reply memnet.Reply
		query func() *dns.Msg
	}{
		{"A with EDNS", memnet.Answer("@ 300 IN A 192.0.2.1", "@ 60 IN A 192.0.2.2"), func() *dns.Msg { return queryFor("a.example.", dns.TypeA) }},
		{"A without EDNS", memnet.Answer("@ 300 IN A 192.0.2.1"), func() *dns.Msg {
			q := new(dns.Msg)
			q.SetQuestion("plain.example.", dns.TypeA)
			q.Id, q.RecursionDesired = 0x1234, false
			return q
		}},
		{"NXDOMAIN with SOA", negativeReply, func() *dns.Msg { return queryFor("missing.example.", dns.TypeA) }},
		{"DO bit", memnet.Answer("@ 300 IN A 192.0.2.3"), func() *dns.Msg {
			q := queryFor("signed.example.", dns.TypeA)
			q.IsEdns0().SetDo()
			return q
		}},
	}
	for _, s := range shapes {
		t.Run(s.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				x := newMirrored(t, cacheConfig(engine.CacheConfig{}), memnet.Respond(s.reply))
				query := pack(t, s.query())
				for x.published == 0 {
					if _, ok := x.mirrorAnswer(query); ok {
						t.Fatal("the mirror answered before the entry was published")
					}
					x.engineAnswer(query)
					if x.e.Counters().CacheHits > 30 {
						t.Fatal("30 hits and nothing published")
					}
				}
				time.Sleep(1500 * time.Millisecond) // TTLs aged by 1 s
				q := s.query()
				q.Id = 0x4242
				q.Question[0].Name = mixedCase(q.Question[0].Name)
				query = pack(t, q)
				before, mirrorBefore := x.e.Counters(), x.m.Counters()
				want := x.engineAnswer(query)
				got, ok := x.mirrorAnswer(query)
				if !ok {
					t.Fatal("the mirror did not answer a published entry")
				}
				if !bytes.Equal(got.Wire, want.Wire) {
					t.Fatalf("the mirror's reply differs from the engine's:\n got %x\nwant %x", got.Wire, want.Wire)
				}
				if m := new(dns.Msg); m.Unpack(got.Wire) != nil || m.Id != 0x4242 || m.Question[0].Name != q.Question[0].Name {
					t.Fatalf("the reply does not unpack with the client's ID and case: %v", m)
				}
				if got.Rcode != want.Rcode || got.TTL != want.TTL || got.Cacheable != want.Cacheable || got.Result != want.Result ||
					!got.CacheHit || got.QName != want.QName || got.Scope != want.Scope || got.Attempts != 0 {
					t.Fatalf("mirror response %+v, engine's %+v", got, want)
				}
				hits := x.m.Counters()
				if hits.CacheHits-mirrorBefore.CacheHits != 1 || x.e.Counters().CacheHits-before.CacheHits != 1 {
					t.Fatalf("cache hits: mirror +%d, engine +%d; want 1 each", hits.CacheHits-mirrorBefore.CacheHits, x.e.Counters().CacheHits-before.CacheHits)
				}
				evs := x.events.questionList()
				if len(evs) == 0 || !evs[len(evs)-1].CacheHit || evs[len(evs)-1].QName != want.QName {
					t.Fatalf("the mirror's question event: %+v", evs)
				}
			})
		})
	}
}

// mixedCase upper-cases every other letter of name.
func mixedCase(name string) string {
	b := []byte(name)
	for i := 0; i < len(b); i += 2 {
		if b[i] >= 'a' && b[i] <= 'z' {
			b[i] -= 'a' - 'A'
		}
	}
	return string(b)
}

// An entry is published only once its hits are pure reads: after
// policyReads reads and PrefetchMinHits asks. With prefetch on, the
// mirror stops in the last tenth of the TTL, so the engine sees the hit
// that starts the prefetch, which goes upstream; the refreshed entry is
// published again once hot.
func TestHotEntriesLeavesThePrefetchWindowToTheEngine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		x := newMirrored(t, cacheConfig(engine.CacheConfig{PrefetchMinHits: 20}),
			memnet.Respond(memnet.Answer("@ 100 IN A 192.0.2.1")))
		query := pack(t, queryFor("hot.example.", dns.TypeA))
		x.engineAnswer(query) // the miss: asks 1
		// 16 hits reach policyReads, but asks stays below 20 until the
		// 19th hit.
		for i := range 18 {
			x.engineAnswer(query)
			if x.published != 0 {
				t.Fatalf("published after %d hits, before PrefetchMinHits", i+1)
			}
			if _, ok := x.mirrorAnswer(query); ok {
				t.Fatalf("the mirror answered after %d hits", i+1)
			}
		}
		for x.published == 0 {
			x.engineAnswer(query)
		}
		time.Sleep(80 * time.Second)
		for range 50 {
			if _, ok := x.mirrorAnswer(query); !ok {
				t.Fatal("the mirror did not answer at 80 s of 100")
			}
		}
		time.Sleep(10 * time.Second) // 90 s: the prefetch window
		if _, ok := x.mirrorAnswer(query); ok {
			t.Fatal("the mirror answered in the prefetch window")
		}
		if n := len(x.nw.Transactions()); n != 1 {
			t.Fatalf("%d upstream queries before the window's hit, want 1", n)
		}
		if r := x.engineAnswer(query); !r.CacheHit {
			t.Fatalf("the engine's hit in the window: %+v", r)
		}
		synctest.Wait() // the prefetch
		if n := len(x.nw.Transactions()); n != 2 {
			t.Fatalf("%d upstream queries after the window's hit, want 2 (the prefetch)", n)
		}
		if c := x.e.Counters(); c.Prefetches != 1 {
			t.Fatalf("prefetches %d, want 1", c.Prefetches)
		}
	})
}

// Without prefetch a published entry is served to its TTL and not past
// it (no stale answers), and an engine reload that keeps the cache
// publishes its entries again, for the mirror emptied by its own reload.
func TestHotEntriesServesToTheTTLAndRepublishesAfterAReload(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := cacheConfig(engine.CacheConfig{StaleMax: time.Hour})
		x := newMirrored(t, cfg, memnet.Respond(memnet.Answer("@ 10 IN A 192.0.2.1")))
		query := pack(t, queryFor("ttl.example.", dns.TypeA))
		for x.published == 0 {
			x.engineAnswer(query)
		}
		if err := x.m.Reconfigure(cfg); err != nil {
			t.Fatal(err)
		}
		if _, ok := x.mirrorAnswer(query); ok {
			t.Fatal("the mirror answered after its reload emptied it")
		}
		if err := x.e.Reconfigure(cfg); err != nil {
			t.Fatal(err)
		}
		x.engineAnswer(query)
		if x.published != 2 {
			t.Fatalf("published %d times, want again after the reload", x.published)
		}
		time.Sleep(9 * time.Second)
		if _, ok := x.mirrorAnswer(query); !ok {
			t.Fatal("the mirror did not answer at 9 s of 10")
		}
		time.Sleep(time.Second)
		if _, ok := x.mirrorAnswer(query); ok {
			t.Fatal("the mirror answered at the TTL")
		}
	})
}

// While suspended (a reload under way) the mirror neither answers nor
// takes records.
func TestHotEntriesSuspendedTakesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		x := newMirrored(t, cacheConfig(engine.CacheConfig{}), memnet.Respond(memnet.Answer("@ 100 IN A 192.0.2.1")))
		x.m.Suspend()
		query := pack(t, queryFor("s.example.", dns.TypeA))
		for x.published == 0 {
			x.engineAnswer(query)
		}
		if _, ok := x.mirrorAnswer(query); ok || x.m.Len() != 0 {
			t.Fatalf("suspended: answered %v, %d entries", ok, x.m.Len())
		}
	})
}

// A mirror's hit allocates nothing (a name asked in lower case, with no
// observer that logs), as the engine's own hit.
func TestHotEntriesHitAllocatesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		x := newMirrored(t, cacheConfig(engine.CacheConfig{}), memnet.Respond(memnet.Answer("@ 300 IN A 192.0.2.1")))
		m, err := engine.NewHotEntries(cacheConfig(engine.CacheConfig{}), nil)
		if err != nil {
			t.Fatal(err)
		}
		x.m = m // no observer: the test's event log allocates
		query := pack(t, queryFor("alloc.example.", dns.TypeA))
		for x.published == 0 {
			x.engineAnswer(query)
		}
		dst := make([]byte, 0, 512)
		if _, ok := m.AnswerNow(query, dst, nil, nil); !ok {
			t.Fatal("the mirror did not answer")
		}
		if n := testing.AllocsPerRun(100, func() { m.AnswerNow(query, dst, nil, nil) }); n != 0 {
			t.Fatalf("a mirror hit allocates %v times", n)
		}
	})
}
