package engine_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/enginetest"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
	"github.com/miekg/dns"
)

// dropSwitch is a loopback upstream that answers with TTL 1 until
// dropping is set, then drops every query.
func dropSwitch(t *testing.T) (*upstreamtest.Server, *atomic.Bool) {
	var dropping atomic.Bool
	answer := upstreamtest.Answer("@ 1 IN A 192.0.2.1")
	srv := upstreamtest.Start(t, func(q upstreamtest.Query) upstreamtest.Action {
		if dropping.Load() {
			return upstreamtest.Action{}
		}
		return answer(q)
	})
	return srv, &dropping
}

// Serve-stale over real loopback sockets: a name answered, then every
// server dropping. Without the client timer the stale answer comes after
// the attempts (three transaction timeouts, shortened here to 300 ms);
// with it, at the timer, and the upstream question still spends its
// three attempts.
func TestStaleOverLoopback(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		after    time.Duration
		min, max time.Duration
		reason   engine.Reason
	}{
		{"after the attempts", 0, 900 * time.Millisecond, 1800 * time.Millisecond, engine.ReasonAttemptsSpent},
		{"client timer", 500 * time.Millisecond, 500 * time.Millisecond, 850 * time.Millisecond, engine.ReasonStaleTimer},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv, dropping := dropSwitch(t)
			cfg := engine.Config{FallbackServers: []string{srv.String()}, TransactionTimeout: 300 * time.Millisecond,
				Cache: engine.CacheConfig{MaxEntries: 100, StaleMax: time.Hour, StaleAnswerAfter: c.after}}
			e := startEngine(t, cfg, engine.NativeNetwork{})
			ask := func() (enginetest.Response, time.Duration) {
				start := time.Now()
				r := enginetest.Resolve(e, context.Background(), queryFor("stale.example.", dns.TypeA))
				return r, time.Since(start)
			}
			if r, _ := ask(); r.Result != engine.ResultAnswer {
				t.Fatalf("first: %v", r.Result)
			}
			time.Sleep(1100 * time.Millisecond)
			dropping.Store(true)
			r, took := ask()
			if r.Result != engine.ResultStale || r.Reason != c.reason || took < c.min || took > c.max {
				t.Fatalf("%v (%v) after %v, want stale (%v) in [%v, %v]", r.Result, r.Reason, took, c.reason, c.min, c.max)
			}
			if codes := edeCodes(r.Msg); len(codes) != 1 || codes[0] != dns.ExtendedErrorCodeStaleAnswer ||
				r.Msg.Answer[0].Header().Ttl != 30 || r.TTL != 30 {
				t.Fatalf("stale reply %v (Cache-Control TTL %d)", r.Msg, r.TTL)
			}
			deadline := time.Now().Add(3 * time.Second)
			for len(srv.Queries()) < 4 && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			if n := len(srv.Queries()); n != 4 {
				t.Fatalf("upstream read %d queries, want 1 + 3 attempts", n)
			}
		})
	}
}
