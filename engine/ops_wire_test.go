package engine_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/enginetest"
	"github.com/dohfwd/dohfwd/engine/memnet"
	"github.com/miekg/dns"
)

// The operator views (README.md, "Why an answer was what it was") on the
// wire-level path: the EDE list is in
// the bytes ResolveWire writes, and the trace and attempt facts survive
// the stale client timer's detached upstream question.

// A padded query's SERVFAIL is padded to a multiple of 468: the attempt
// list is cut so that the padded reply still fits the client's size.
func TestEDEListFitsThePaddedReply(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := rigScope(3)
		cfg.Attempts = 30
		r := newRig(t, cfg)
		threeFailures(r)
		name := strings.Repeat("a-long-label-to-fill-the-question.", 6) + "example."
		q := newQuery(name, dns.TypeA)
		q.SetEdns0(600, false)
		o := q.IsEdns0()
		o.Option = append(o.Option, &dns.EDNS0_PADDING{Padding: make([]byte, 8)})
		raw, err := q.Pack()
		if err != nil {
			t.Fatal(err)
		}
		resp := r.e.ResolveWire(context.Background(), raw, nil)
		if resp.Result != engine.ResultUnavailable {
			t.Fatalf("result %v", resp.Result)
		}
		if n := len(resp.Wire); n > 600 || n%engine.PaddingBlock != 0 {
			t.Fatalf("reply is %d bytes: want a multiple of %d within the client's 600", n, engine.PaddingBlock)
		}
		m := new(dns.Msg)
		if err := m.Unpack(resp.Wire); err != nil {
			t.Fatal(err)
		}
		text := edeText(m)
		if !strings.Contains(text, rigServer(1).String()+"/udp timeout") || !strings.HasSuffix(text, " more") {
			t.Fatalf("EDE text %q, want the first attempts and a count of the rest", text)
		}
	})
}

// With the client response timer, a question with a stale entry leads
// through a detached copy. When that copy's answer comes before the timer,
// the client's answer is its own upstream answer (not shared), with the
// copy's attempts and time; the copy's attempt events carry the client's
// trace; a traced question that waited for it is listed as served and
// names the trace it joined.
func TestStaleTimerLeaderKeepsTraceAndAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := staleRig(t, 1800*time.Millisecond)
		r.timed(queryFor("www.example.", dns.TypeA))
		time.Sleep(61 * time.Second)
		r.serve(memnet.Respond(memnet.After(500*time.Millisecond, memnet.Answer("@ 60 IN A 192.0.2.2"))))
		before := len(r.log.attemptList())

		var wg sync.WaitGroup
		var first, second enginetest.Response
		wg.Go(func() {
			first = enginetest.Resolve(r.e, engine.WithTrace(context.Background(), traceN(1)), queryFor("www.example.", dns.TypeA))
		})
		time.Sleep(100 * time.Millisecond)
		wg.Go(func() {
			second = enginetest.Resolve(r.e, engine.WithTrace(context.Background(), traceN(2)), queryFor("www.example.", dns.TypeA))
		})
		wg.Wait()

		if first.Result != engine.ResultAnswer || first.Shared || first.Attempts != 1 || first.Upstream != 500*time.Millisecond {
			t.Fatalf("first: result %v shared %v attempts %d upstream %v; want its own answer, 1 attempt, 500ms",
				first.Result, first.Shared, first.Attempts, first.Upstream)
		}
		if second.Result != engine.ResultAnswer || !second.Shared || second.Attempts != 0 {
			t.Fatalf("second: result %v shared %v attempts %d; want the shared answer", second.Result, second.Shared, second.Attempts)
		}
		atts := r.log.attemptList()[before:]
		if len(atts) != 1 || atts[0].Trace == nil || *atts[0].Trace != traceN(1) {
			t.Fatalf("attempts %+v: want one, in trace 1", atts)
		}
		qs := r.log.questionList()
		var sawFirst, sawSecond bool
		for _, q := range qs {
			switch {
			case q.Trace != nil && *q.Trace == traceN(1):
				sawFirst = true
				if q.Joined != nil || len(q.Served) != 1 || *q.Served[0] != traceN(2) || q.Attempts != 1 {
					t.Fatalf("first's event: joined %v served %v attempts %d", q.Joined, q.Served, q.Attempts)
				}
			case q.Trace != nil && *q.Trace == traceN(2):
				sawSecond = true
				if q.Joined == nil || *q.Joined != traceN(1) || q.Served != nil {
					t.Fatalf("second's event: joined %v served %v", q.Joined, q.Served)
				}
			}
		}
		if !sawFirst || !sawSecond {
			t.Fatalf("question events %+v", qs)
		}
	})
}

// Explain names an expired entry that serve-stale would answer with, and
// the question then does answer stale from it when the servers fail.
func TestExplainShowsTheStaleEntry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := staleRig(t, 0)
		r.timed(queryFor("www.example.", dns.TypeA))
		time.Sleep(70 * time.Second) // TTL 60: expired 10 s ago, in its hour of stale window
		x := enginetest.Explain(r.e, queryFor("www.example.", dns.TypeA))
		c := x.Candidates[0]
		if c.Cached != "" || c.Stale != "answer" || c.StaleRemaining != 3590 {
			t.Fatalf("candidate %+v: want no live entry, a stale answer with 3590 s of window left", c)
		}
		if !strings.Contains(x.Outcome, "answers stale if that fails") {
			t.Fatalf("outcome %q", x.Outcome)
		}
		r.serve(memnet.Silent())
		if resp, _ := r.timed(queryFor("www.example.", dns.TypeA)); resp.Result != engine.ResultStale {
			t.Fatalf("result %v, want stale as explained", resp.Result)
		}
		time.Sleep(2 * time.Hour)
		if c := enginetest.Explain(r.e, queryFor("www.example.", dns.TypeA)).Candidates[0]; c.Stale != "" || c.Cached != "" {
			t.Fatalf("past the stale window: %+v", c)
		}
	})
}
