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

// Serve-stale (RFC 8767), under synctest on memnet: every
// duration below is exact.

// staleRig is a rig whose scope "main" has two servers answering
// name A 192.0.2.1 with TTL 60, a cache with serve-stale kept for an hour,
// and the client response timer at after (0: off).
func staleRig(t *testing.T, after time.Duration) *rig {
	cfg := rigScope(2)
	cfg.Cache = engine.CacheConfig{MaxEntries: 100, StaleMax: time.Hour, StaleAnswerAfter: after}
	r := newRig(t, cfg)
	r.serve(memnet.Respond(memnet.Answer("@ 60 IN A 192.0.2.1")))
	return r
}

// serve sets the behaviour of both servers.
func (r *rig) serve(h memnet.Handler) {
	r.net.Handle(rigServer(1), h)
	r.net.Handle(rigServer(2), h)
}

// timed asks q (an EDNS query) and returns the response and how long it
// took.
func (r *rig) timed(q *dns.Msg) (enginetest.Response, time.Duration) {
	start := time.Now()
	resp := enginetest.Resolve(r.e, context.Background(), q)
	return resp, time.Since(start)
}

// ede returns the EDE info-codes of m's OPT record.
func edeCodes(m *dns.Msg) []uint16 {
	var out []uint16
	if o := m.IsEdns0(); o != nil {
		for _, opt := range o.Option {
			if e, ok := opt.(*dns.EDNS0_EDE); ok {
				out = append(out, e.InfoCode)
			}
		}
	}
	return out
}

// checkStale fails unless resp is a stale answer for reason carrying
// rcode, every record at TTL 30 and EDE 3, with a Cache-Control TTL of
// ttl.
func checkStale(t *testing.T, resp enginetest.Response, reason engine.Reason, rcode int, ttl uint32) {
	t.Helper()
	if resp.Result != engine.ResultStale || resp.Reason != reason {
		t.Fatalf("result %v (%v), want stale (%v)", resp.Result, resp.Reason, reason)
	}
	m := resp.Msg
	if m.Rcode != rcode || resp.Rcode != rcode {
		t.Fatalf("rcode %d (response %d), want %d", m.Rcode, resp.Rcode, rcode)
	}
	if len(m.Answer)+len(m.Ns) == 0 {
		t.Fatalf("stale reply has no records: %v", m)
	}
	for _, rr := range append(append([]dns.RR{}, m.Answer...), m.Ns...) {
		if rr.Header().Ttl != 30 {
			t.Fatalf("stale record %v: TTL %d, want 30", rr, rr.Header().Ttl)
		}
	}
	if codes := edeCodes(m); len(codes) != 1 || codes[0] != dns.ExtendedErrorCodeStaleAnswer {
		t.Fatalf("EDE codes %v, want [3] (Stale Answer)", codes)
	}
	if !resp.Cacheable || resp.TTL != ttl {
		t.Fatalf("Cache-Control TTL %d cacheable %v, want %d", resp.TTL, resp.Cacheable, ttl)
	}
}

func TestStaleAnswerAfterAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := staleRig(t, 0)
		if resp, _ := r.timed(queryFor("www.example.", dns.TypeA)); resp.Result != engine.ResultAnswer {
			t.Fatalf("first: %v", resp.Result)
		}
		time.Sleep(61 * time.Second)
		r.serve(memnet.Silent())
		resp, took := r.timed(queryFor("www.example.", dns.TypeA))
		if took != 6*time.Second || resp.Attempts != 3 {
			t.Fatalf("stale answer after %v and %d attempts, want 6s and 3", took, resp.Attempts)
		}
		checkStale(t, resp, engine.ReasonAttemptsSpent, dns.RcodeSuccess, 30)
		if a := resp.Msg.Answer; len(a) != 1 || a[0].(*dns.A).A.String() != "192.0.2.1" || resp.Msg.Id != 0xbeef {
			t.Fatalf("stale answer %v id %#x, want the cached record and the client's id", a, resp.Msg.Id)
		}
		// The attempt rules ran as without serve-stale: three timeouts,
		// both servers demoted, upstream_failed 3.
		if got := r.log.outcomes(); !equalStrings(got, []string{"udp/answer", "udp/timeout", "udp/timeout", "udp/timeout"}) {
			t.Fatalf("attempts %v", got)
		}
		if !r.demoted(rigServer(1)) || !r.demoted(rigServer(2)) {
			t.Fatal("servers not demoted")
		}
		c := r.e.Counters()
		if c.UpstreamFailed != 3 || c.Questions["stale"] != 1 || c.Stale["attempts spent"] != 1 || c.Questions["unavailable"] != 0 {
			t.Fatalf("counters %+v", c)
		}
		qs := r.log.questionList()
		if ev := qs[len(qs)-1]; ev.Result != engine.ResultStale || ev.Reason != engine.ReasonAttemptsSpent || ev.Attempts != 3 {
			t.Fatalf("question event %+v, want stale for attempts spent", ev)
		}
		// The wire form is the same reply.
		q := queryFor("www.example.", dns.TypeA)
		raw, _ := q.Pack()
		w := r.e.ResolveWire(context.Background(), raw, nil)
		m := new(dns.Msg)
		if err := m.Unpack(w.Wire); err != nil || w.Result != engine.ResultStale || w.TTL != 30 {
			t.Fatalf("ResolveWire: %v %v TTL %d", err, w.Result, w.TTL)
		}
		if codes := edeCodes(m); len(codes) != 1 || codes[0] != 3 || m.Answer[0].Header().Ttl != 30 {
			t.Fatalf("ResolveWire stale reply %v", m)
		}
	})
}

func TestStaleOffServfail(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := rigScope(2)
		cfg.Cache = engine.CacheConfig{MaxEntries: 100} // stale_max 0
		r := newRig(t, cfg)
		r.serve(memnet.Respond(memnet.Answer("@ 60 IN A 192.0.2.1")))
		r.timed(queryFor("www.example.", dns.TypeA))
		time.Sleep(61 * time.Second)
		r.serve(memnet.Silent())
		resp, took := r.timed(queryFor("www.example.", dns.TypeA))
		if resp.Result != engine.ResultUnavailable || resp.Reason != engine.ReasonAttemptsSpent ||
			resp.Msg.Rcode != dns.RcodeServerFailure || took != 6*time.Second || resp.Cacheable {
			t.Fatalf("stale off: %v (%v) rcode %d after %v; want SERVFAIL after 6s", resp.Result, resp.Reason, resp.Msg.Rcode, took)
		}
	})
}

func TestStaleWindowEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := staleRig(t, 0)
		r.timed(queryFor("www.example.", dns.TypeA))
		time.Sleep(60*time.Second + time.Hour) // TTL + stale_max
		r.serve(memnet.Silent())
		if resp, _ := r.timed(queryFor("www.example.", dns.TypeA)); resp.Result != engine.ResultUnavailable {
			t.Fatalf("past the stale window: %v, want unavailable", resp.Result)
		}
	})
}

func TestStaleClientTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := staleRig(t, 1800*time.Millisecond)
		r.timed(queryFor("www.example.", dns.TypeA))
		time.Sleep(61 * time.Second)
		r.serve(memnet.Silent())
		resp, took := r.timed(queryFor("www.example.", dns.TypeA))
		if took != 1800*time.Millisecond {
			t.Fatalf("answered after %v, want 1.8s", took)
		}
		checkStale(t, resp, engine.ReasonStaleTimer, dns.RcodeSuccess, 30)
		// The upstream question goes on under its usual budget: three
		// attempts, 6 s, each charged as usual.
		synctest.Wait()
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if got := r.log.outcomes(); !equalStrings(got, []string{"udp/answer", "udp/timeout", "udp/timeout", "udp/timeout"}) {
			t.Fatalf("attempts %v, want three timeouts after the first answer", got)
		}
		if c := r.e.Counters(); c.UpstreamFailed != 3 || c.Cancelled != 0 {
			t.Fatalf("upstream_failed %d cancelled %d, want 3 and 0", c.UpstreamFailed, c.Cancelled)
		}
		// Unavailable is not stored: the stale entry answers again.
		r.serve(memnet.Silent())
		resp, took = r.timed(queryFor("www.example.", dns.TypeA))
		if resp.Result != engine.ResultStale || took != 1800*time.Millisecond {
			t.Fatalf("again: %v after %v", resp.Result, took)
		}
		time.Sleep(5 * time.Second) // its upstream question ends
	})
}

// An upstream that answers after the timer: the client gets the stale
// answer at 1.8 s, the late reply refreshes the entry.
func TestStaleLateReplyRefreshes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := staleRig(t, 1800*time.Millisecond)
		r.timed(queryFor("www.example.", dns.TypeA))
		time.Sleep(61 * time.Second)
		r.serve(memnet.Respond(memnet.After(1900*time.Millisecond, memnet.Answer("@ 60 IN A 192.0.2.2"))))
		resp, took := r.timed(queryFor("www.example.", dns.TypeA))
		if took != 1800*time.Millisecond || resp.Msg.Answer[0].(*dns.A).A.String() != "192.0.2.1" {
			t.Fatalf("after %v: %v", took, resp.Msg.Answer)
		}
		checkStale(t, resp, engine.ReasonStaleTimer, dns.RcodeSuccess, 30)
		time.Sleep(200 * time.Millisecond)
		synctest.Wait()
		before := len(r.net.Transactions())
		resp, _ = r.timed(queryFor("www.example.", dns.TypeA))
		if !resp.CacheHit || resp.Msg.Answer[0].(*dns.A).A.String() != "192.0.2.2" || len(r.net.Transactions()) != before {
			t.Fatalf("after the late reply: hit %v answer %v; want the refreshed entry from the cache", resp.CacheHit, resp.Msg.Answer)
		}
		if got := r.log.outcomes(); !equalStrings(got, []string{"udp/answer", "udp/answer"}) {
			t.Fatalf("attempts %v", got)
		}
	})
}

// A client that goes away while its upstream question runs behind a
// stale entry charges no server: the question is not its to end.
func TestStaleClientCancelChargesNoServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := staleRig(t, 1800*time.Millisecond)
		r.timed(queryFor("www.example.", dns.TypeA))
		time.Sleep(61 * time.Second)
		r.serve(memnet.Respond(memnet.After(1500*time.Millisecond, memnet.Answer("@ 60 IN A 192.0.2.2"))))
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		if resp := enginetest.Resolve(r.e, ctx, queryFor("www.example.", dns.TypeA)); resp.Result != engine.ResultCancelled {
			t.Fatalf("client gone: %v, want cancelled", resp.Result)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if got := r.log.outcomes(); !equalStrings(got, []string{"udp/answer", "udp/answer"}) {
			t.Fatalf("attempts %v, want the upstream question answered", got)
		}
		if c := r.e.Counters(); c.Cancelled != 0 || c.UpstreamFailed != 0 || r.demoted(rigServer(1)) {
			t.Fatalf("cancelled %d upstream_failed %d: the client's going charged something", c.Cancelled, c.UpstreamFailed)
		}
		if resp, _ := r.timed(queryFor("www.example.", dns.TypeA)); !resp.CacheHit {
			t.Fatalf("the answer that came after the client left is not cached: %v", resp.Result)
		}
	})
}

// staleNegativeReply answers NXDOMAIN for A and NODATA for TXT, with a SOA of
// TTL 300 and MINIMUM minimum.
func staleNegativeReply(minimum uint32) memnet.Reply {
	return memnet.Reply{Msg: func(q *dns.Msg) *dns.Msg {
		rcode := dns.RcodeNameError
		if q.Question[0].Qtype == dns.TypeTXT {
			rcode = dns.RcodeSuccess
		}
		m := new(dns.Msg)
		m.SetRcode(q, rcode)
		soa, _ := dns.NewRR(soaText(300, minimum))
		m.Ns = append(m.Ns, soa)
		return m
	}}
}

// A stale NXDOMAIN or NODATA keeps its SOA, every TTL and the
// Cache-Control TTL the stale TTL (30), whether the SOA's MINIMUM is above
// it (60) or below it (5): the MINIMUM bounds the upstream's denial, not
// how long a stale answer stands.
func TestStaleNegative(t *testing.T) {
	for _, minimum := range []uint32{60, 5} {
		for _, c := range []struct {
			qtype uint16
			rcode int
		}{{dns.TypeA, dns.RcodeNameError}, {dns.TypeTXT, dns.RcodeSuccess}} {
			t.Run(fmt.Sprintf("%s/minimum=%d", dns.TypeToString[c.qtype], minimum), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					r := staleRig(t, 0)
					r.serve(memnet.Respond(staleNegativeReply(minimum)))
					if resp, _ := r.timed(queryFor("gone.example.", c.qtype)); resp.Msg.Rcode != c.rcode || resp.TTL != minimum {
						t.Fatalf("first: rcode %d TTL %d", resp.Msg.Rcode, resp.TTL)
					}
					time.Sleep(time.Duration(minimum+1) * time.Second)
					r.serve(memnet.Silent())
					resp, _ := r.timed(queryFor("gone.example.", c.qtype))
					checkStale(t, resp, engine.ReasonAttemptsSpent, c.rcode, 30)
					if len(resp.Msg.Ns) != 1 || resp.Msg.Ns[0].Header().Rrtype != dns.TypeSOA {
						t.Fatalf("stale negative answer without its SOA: %v", resp.Msg.Ns)
					}
				})
			})
		}
	}
}

// With the ceiling saturated, a question with a stale entry is refused
// (and counted so) and answered stale at once.
func TestStaleCeilingSaturated(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := rigScope(2)
		cfg.InFlightCeiling = 1
		cfg.Cache = engine.CacheConfig{MaxEntries: 100, StaleMax: time.Hour, StaleAnswerAfter: 1800 * time.Millisecond}
		r := newRig(t, cfg)
		r.serve(memnet.Respond(memnet.Answer("@ 60 IN A 192.0.2.1")))
		r.timed(queryFor("www.example.", dns.TypeA))
		time.Sleep(61 * time.Second)
		r.serve(memnet.Silent())
		fill(t, r, 1, "example.")
		resp, took := r.timed(queryFor("www.example.", dns.TypeA))
		if took != 0 {
			t.Fatalf("answered after %v, want at once", took)
		}
		checkStale(t, resp, engine.ReasonInFlightCeiling, dns.RcodeSuccess, 30)
		if c := r.e.Counters(); c.Refused != 1 || c.Stale["in-flight ceiling"] != 1 {
			t.Fatalf("refused %d stale %v", c.Refused, c.Stale)
		}
		// A name without a stale entry is refused as today.
		if resp, _ := r.timed(queryFor("new.example.", dns.TypeA)); resp.Result != engine.ResultUnavailable || resp.Reason != engine.ReasonInFlightCeiling {
			t.Fatalf("no stale entry: %v (%v)", resp.Result, resp.Reason)
		}
	})
}

// A reload keeps the entries of scopes that still exist, for stale
// answers only: the new servers are asked first.
func TestStaleKeptOverReload(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := staleRig(t, 0)
		r.timed(queryFor("www.example.", dns.TypeA))
		cfg := rigScope(2)
		cfg.Scopes[0].Servers = []string{rigServer(3).String()} // silent
		cfg.Cache = engine.CacheConfig{MaxEntries: 100, StaleMax: time.Hour}
		if err := r.e.Reconfigure(cfg); err != nil {
			t.Fatal(err)
		}
		resp, _ := r.timed(queryFor("www.example.", dns.TypeA))
		checkStale(t, resp, engine.ReasonAttemptsSpent, dns.RcodeSuccess, 30)
		if resp.Attempts != 3 {
			t.Fatalf("attempts %d: the new server must be asked first", resp.Attempts)
		}
		cfg.Scopes[0].Name = "renamed"
		if err := r.e.Reconfigure(cfg); err != nil {
			t.Fatal(err)
		}
		if resp, _ := r.timed(queryFor("www.example.", dns.TypeA)); resp.Result != engine.ResultUnavailable {
			t.Fatalf("scope gone: %v, want unavailable", resp.Result)
		}
	})
}

// A scope left without servers answers stale from what its servers gave.
func TestStaleEmptyScope(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := rigScope(2)
		cfg.Scopes[0].Domains = []string{"example."}
		cfg.Cache = engine.CacheConfig{MaxEntries: 100, StaleMax: time.Hour}
		r := newRig(t, cfg)
		r.serve(memnet.Respond(memnet.Answer("@ 60 IN A 192.0.2.1")))
		if resp, _ := r.timed(queryFor("www.example.", dns.TypeA)); resp.Result != engine.ResultAnswer || resp.Scope != "main" {
			t.Fatalf("first: %v in %q", resp.Result, resp.Scope)
		}
		cfg = rigScope(0) // a new value: the engine keeps the slices it was given
		cfg.Scopes[0].Domains = []string{"example."}
		cfg.Cache = engine.CacheConfig{MaxEntries: 100, StaleMax: time.Hour}
		if err := r.e.Reconfigure(cfg); err != nil {
			t.Fatal(err)
		}
		resp, took := r.timed(queryFor("www.example.", dns.TypeA))
		if took != 0 {
			t.Fatalf("took %v", took)
		}
		checkStale(t, resp, engine.ReasonNoServers, dns.RcodeSuccess, 30)
	})
}
