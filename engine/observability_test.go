package engine_test

import (
	"encoding/json"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/memnet"
	"github.com/miekg/dns"
)

// Observability (README.md, "Logs" and "Metrics"): counters, the in-flight gauge, the status
// snapshot, one event per attempt and one per question.

func TestEventsAndCounters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigScope(3))
		r.net.Handle(rigServer(1), memnet.Respond(memnet.After(10*time.Millisecond, memnet.Rcode(dns.RcodeServerFailure))))
		r.net.Handle(rigServer(2), truncatedThen(memnet.Respond(memnet.After(30*time.Millisecond, memnet.Answer("@ 60 IN A 192.0.2.2")))))
		res := r.ask("Www.Example.")
		if res.Result != engine.ResultAnswer || res.Attempts != 3 || res.Scope != "main" {
			t.Fatalf("response %v attempts %d scope %q", res.Result, res.Attempts, res.Scope)
		}
		atts := r.log.attemptList()
		type want struct {
			n         int
			server    int
			transport engine.Transport
			outcome   engine.Outcome
			rcode     int
			rtt       time.Duration
			demoted   bool
		}
		wants := []want{
			{1, 1, engine.UDP, engine.OutcomeRcode, dns.RcodeServerFailure, 10 * time.Millisecond, true},
			{2, 2, engine.UDP, engine.OutcomeTruncated, dns.RcodeSuccess, 0, false},
			{3, 2, engine.TCP, engine.OutcomeAnswer, dns.RcodeSuccess, 30 * time.Millisecond, false},
		}
		if len(atts) != len(wants) {
			t.Fatalf("%d attempt events, want %d", len(atts), len(wants))
		}
		for i, w := range wants {
			a := atts[i]
			if a.Question != res.Question || a.QName != "Www.Example." || a.QType != dns.TypeA || a.Scope != "main" ||
				a.Attempt != w.n || a.Server != rigServer(w.server) || a.Transport != w.transport ||
				a.Outcome != w.outcome || a.Rcode != w.rcode || a.RTT != w.rtt || a.Demoted != w.demoted {
				t.Errorf("attempt event %d: %+v, want %+v", i, a, w)
			}
		}
		qs := r.log.questionList()
		if len(qs) != 1 {
			t.Fatalf("%d question events, want 1", len(qs))
		}
		if q := qs[0]; q.Question != res.Question || q.Result != engine.ResultAnswer || q.Attempts != 3 ||
			q.CacheHit || q.Duration != 40*time.Millisecond || q.QName != "Www.Example." || q.Scope != "main" {
			t.Errorf("question event %+v", q)
		}

		// A second question: timeouts and a local error, then unavailable.
		r.net.Handle(rigServer(3), memnet.Fail("open", engine.ErrLocal))
		r.net.Handle(rigServer(2), memnet.Silent())
		r.net.Handle(rigServer(1), memnet.Fail("receive", engine.ErrRefused))
		r.ask("two.example.")
		c := r.e.Counters()
		wantAttempts := map[string]uint64{"rcode": 1, "truncated": 1, "answer": 1, "timeout": 1, "local_error": 1, "recv_error": 1}
		for k, v := range c.Attempts {
			if v != wantAttempts[k] {
				t.Errorf("attempts[%s] = %d, want %d", k, v, wantAttempts[k])
			}
		}
		if c.Questions["answer"] != 1 || c.Questions["unavailable"] != 1 || c.UpstreamFailed != 4 || c.Refused != 0 || c.Cancelled != 0 {
			t.Errorf("counters %+v", c)
		}
		if n := len(r.log.questionList()); n != 2 {
			t.Errorf("%d question events after two questions", n)
		}
		if ids := r.log.questionList(); ids[0].Question == ids[1].Question {
			t.Error("two questions share an id")
		}
	})
}

func TestInFlightGaugeAndStatus(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := rigScope(2)
		cfg.FallbackServers = []string{"127.0.1.50", "[::1]:5353"}
		r := newRig(t, cfg)
		r.net.Handle(rigServer(1), memnet.Respond(memnet.Rcode(dns.RcodeRefused)))
		r.ask("set-up.example.") // demotes 1; 2 times out twice (2 s each)
		start := time.Now()
		r.bg.Go(func() { r.ask("slow.example.") })
		synctest.Wait()
		if n := r.e.InFlight(); n != 1 {
			t.Fatalf("in flight %d while a question waits, want 1", n)
		}
		st := r.e.Status()
		if st.InFlight != 1 || st.InFlightCeiling != 4096 {
			t.Fatalf("status in flight %d ceiling %d", st.InFlight, st.InFlightCeiling)
		}
		b, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		var decoded struct {
			Scopes []struct {
				Name    string `json:"name"`
				Servers []struct {
					Address      string     `json:"address"`
					Demoted      bool       `json:"demoted"`
					DemotedUntil *time.Time `json:"demoted_until"`
				} `json:"servers"`
			} `json:"scopes"`
			FallbackServers []string       `json:"fallback_servers"`
			Counters        map[string]any `json:"counters"`
			InFlight        int            `json:"in_flight"`
		}
		if err := json.Unmarshal(b, &decoded); err != nil {
			t.Fatal(err)
		}
		sv := decoded.Scopes[0].Servers
		if decoded.Scopes[0].Name != "main" || len(sv) != 2 || sv[0].Address != "127.0.1.1:53" || !sv[0].Demoted || sv[0].DemotedUntil == nil {
			t.Fatalf("status %s", b)
		}
		// Server 2 timed out at start (the set-up took its 2 s).
		if !sv[1].Demoted || sv[1].DemotedUntil.Sub(start) != 30*time.Second {
			t.Fatalf("server 2: %+v (start %v)", sv[1], start)
		}
		if !equalStrings(decoded.FallbackServers, []string{"127.0.1.50:53", "[::1]:5353"}) {
			t.Fatalf("fallback servers %v", decoded.FallbackServers)
		}
		for _, k := range []string{"upstream_failed", "refused", "cancelled", "mismatched_replies", "attempts", "questions"} {
			if _, ok := decoded.Counters[k]; !ok {
				t.Errorf("counters lack %q: %s", k, b)
			}
		}
		r.bg.Wait()
		if n := r.e.InFlight(); n != 0 {
			t.Fatalf("in flight %d after every question ended", n)
		}
	})
}

// TestResponseAnsweredEndsTheQuestion: Response.Answered is the end of the
// question event's Duration (a front end uses it instead of reading the
// clock again): for a forwarded answer the end of its transaction, the
// same reading as its attempt event's end (the rule: no clock reading
// after the last transaction of a question answered by it); for one from
// the cache at once, when the reply was written.
func TestResponseAnsweredEndsTheQuestion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := rigScope(1)
		cfg.Cache = engine.CacheConfig{MaxEntries: 10}
		r := newRig(t, cfg)
		r.net.Handle(rigServer(1), memnet.Respond(memnet.After(40*time.Millisecond, memnet.Answer("@ 60 IN A 192.0.2.2"))))
		start := time.Now()
		res := r.ask("www.example.")
		if res.Result != engine.ResultAnswer || res.Answered.Sub(start) != 40*time.Millisecond {
			t.Fatalf("forwarded: %v answered %v after the start, want 40ms", res.Result, res.Answered.Sub(start))
		}
		if as := r.log.attemptList(); len(as) != 1 || !as[0].End.Equal(res.Answered) || as[0].End.Sub(res.Answered) != 0 {
			t.Fatalf("forwarded: answered %v, attempts %+v: want the attempt's end", res.Answered, as)
		}
		time.Sleep(time.Second)
		q, err := newQuery("www.example.", dns.TypeA).Pack()
		if err != nil {
			t.Fatal(err)
		}
		hit, ok := r.e.ResolveWireImmediate(q, nil, nil, nil)
		if !ok || !hit.CacheHit || !hit.Answered.Equal(time.Now()) {
			t.Fatalf("cache hit: ok %v hit %v answered %v, now %v", ok, hit.CacheHit, hit.Answered, time.Now())
		}
		qs := r.log.questionList()
		if len(qs) != 2 || qs[0].Duration != 40*time.Millisecond || qs[1].Duration != 0 {
			t.Fatalf("question events %+v", qs)
		}
	})
}
