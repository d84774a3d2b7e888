package host

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/edge/abi"
	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
)

// A miss that continues in the module's poll, so no goroutine of the
// module waits on it (edge/README.md, "Goroutine switches per question"): its first query
// is sent in the poll that delivers the question (engine.StartMiss) and
// its reply's read event is finished in the poll that delivers it
// (engine.FinishStarted), with no goroutine of the module parked or woken
// for it. Any other end of that wait goes on on a worker goroutine, under
// every rule as before (the edge rule tests in host_test.go,
// cancel_test.go and shared_test.go run through it).

// Plain misses, one at a time and 64 at once, each to a server that
// answers: every one is Finished in a poll, none Waited on a worker, and
// no goroutine of the module parked (abi.Status.Parked), with the cache
// off and on.
func TestWazeroMissFinishedInPollParksNoGoroutine(t *testing.T) {
	t.Parallel()
	for _, cache := range []string{"", "cache: {max_entries: 1000}\n"} {
		up := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.1"))
		config := edgeConfig(up)
		if cache != "" {
			config = withConfig(config, cache)
		}
		e := startEdge(t, config, 1)
		askMissesInPoll(t, e, cache, "misses")
		if n := len(up.Queries()); n != 84 {
			t.Fatalf("cache %q: the upstream read %d queries, want 84", cache, n)
		}
		st := e.status(t)
		if c := st.Counters; c.Attempts["answer"] != 84 || c.Questions["answer"] != 84 || c.MismatchedReplies != 0 {
			t.Fatalf("cache %q: counters %+v; want 84 answered attempts and questions", cache, c)
		}
		if st.InFlight != 0 {
			t.Fatalf("cache %q: %d in flight after every answer, want 0", cache, st.InFlight)
		}
	}
}

// Every end of a started miss's wait other than a reply that ends the
// question goes on on a worker goroutine (Waited, not Finished), which
// meets it under the engine's rules: a SERVFAIL moves to the next server
// at once; a mismatched reply is counted and the right one that follows
// taken; a dropped query moves on after the 2 s timeout; a truncated
// reply retries over TCP.
func TestWazeroStartedMissFallsBackToWorker(t *testing.T) {
	t.Parallel()
	mismatched := func(q upstreamtest.Query) upstreamtest.Action {
		wrong := upstreamtest.ReplyTo(q.Msg, dns.RcodeSuccess, "@ 60 IN A 198.51.100.66")
		wrong.Id ^= 0x5a5a
		right := upstreamtest.ReplyTo(q.Msg, dns.RcodeSuccess, "@ 60 IN A 192.0.2.1")
		return upstreamtest.Action{Replies: []upstreamtest.Reply{{Msg: wrong}, {Msg: right, Delay: 100 * time.Millisecond}}}
	}
	truncated := func(q upstreamtest.Query) upstreamtest.Action {
		m := upstreamtest.ReplyTo(q.Msg, dns.RcodeSuccess)
		m.Truncated = true
		return upstreamtest.Action{Replies: []upstreamtest.Reply{{Msg: m}}}
	}
	for _, tc := range []struct {
		name     string
		first    upstreamtest.Handler
		want     string
		attempts map[string]uint64
	}{
		{"servfail", upstreamtest.Rcode(dns.RcodeServerFailure), "192.0.2.2", map[string]uint64{"rcode": 1, "answer": 1}},
		{"mismatched", mismatched, "192.0.2.1", map[string]uint64{"answer": 1}},
		{"dropped", upstreamtest.Drop(), "192.0.2.2", map[string]uint64{"timeout": 1, "answer": 1}},
		{"truncated", upstreamtest.ByTransport(truncated, upstreamtest.Answer("@ 60 IN A 192.0.2.1")), "192.0.2.1", map[string]uint64{"truncated": 1, "answer": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s1 := upstreamtest.Start(t, tc.first)
			s2 := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.2"))
			e := startEdge(t, edgeConfig(s1, s2), 1)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			m, err := ask(ctx, e.pool, "fallback.example.org")
			if err != nil {
				t.Fatal(err)
			}
			wantAnswer(t, m, tc.want)
			st := wantWentToWorker(t, e, tc.attempts)
			if tc.name == "mismatched" && st.MismatchedReplies != 1 {
				t.Fatalf("mismatched_replies %d, want 1 (counted once, by the worker)", st.MismatchedReplies)
			}
		})
	}
}

// askMissesInPoll asks e 84 distinct names the upstream answers with
// 192.0.2.1, 20 one after another and 64 at once, and asserts that the
// module finished every one in a poll, none on a worker, and that none
// of its goroutines parked.
func askMissesInPoll(t *testing.T, e *edge, cache, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 20 {
		m, err := ask(ctx, e.pool, fmt.Sprintf("one%d.example.org", i))
		if err != nil {
			t.Fatal(err)
		}
		wantAnswer(t, m, "192.0.2.1")
	}
	names := make([]string, 64)
	for i := range names {
		names[i] = fmt.Sprintf("many%d.example.org", i)
	}
	askAll(t, e.pool, names, "192.0.2.1")
	if c := e.queryCounts(t); c != (abi.QueryCounts{Finished: 84}) {
		t.Fatalf("cache %q: questions the module answered: %+v; want all 84 finished in a poll, none on a worker", cache, c)
	}
	if n := e.parked(t); n != 0 {
		t.Fatalf("cache %q: the module's goroutines parked %d times for 84 %s, want 0", cache, n, what)
	}
}

// wantWentToWorker asserts that e's one question went on on a worker
// (Waited, not Finished, a goroutine of the module parked) with these
// attempts, and returns e's counters.
func wantWentToWorker(t *testing.T, e *edge, attempts map[string]uint64) engine.Counters {
	t.Helper()
	if c := e.queryCounts(t); c.Waited != 1 || c.Finished != 0 {
		t.Fatalf("questions the module answered: %+v; want the question gone on on a worker", c)
	}
	if n := e.parked(t); n == 0 {
		t.Fatal("no goroutine of the module parked, yet a question went on on a worker")
	}
	st := e.status(t).Counters
	for k, n := range attempts {
		if st.Attempts[k] != n {
			t.Fatalf("attempts %v; want %v", st.Attempts, attempts)
		}
	}
	return st
}
