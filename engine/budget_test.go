package engine_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/enginetest"
	"github.com/dohfwd/dohfwd/engine/memnet"
	"github.com/miekg/dns"
)

// Time budgets: the client's context, the question timeout and
// the transaction's 2 s; the earliest wins; a transaction ended by the
// client's or the question's budget is not charged to the server.

// notCharged checks that nothing was charged to any server.
func notCharged(t *testing.T, r *rig, servers ...int) {
	t.Helper()
	c := r.e.Counters()
	if c.UpstreamFailed != 0 {
		t.Fatalf("upstream_failed = %d, want 0", c.UpstreamFailed)
	}
	for _, s := range servers {
		if r.demoted(rigServer(s)) {
			t.Fatalf("server %d demoted by a cancelled transaction", s)
		}
	}
}

func TestBudgetClientDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigScope(2))
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		start := time.Now()
		res := enginetest.Resolve(r.e, ctx, newQuery("x.example.", dns.TypeA))
		if res.Result != engine.ResultCancelled || time.Since(start) != 500*time.Millisecond {
			t.Fatalf("%v after %v, want cancelled at 500ms", res.Result, time.Since(start))
		}
		if got := r.log.outcomes(); !equalStrings(got, []string{"udp/cancelled"}) {
			t.Fatalf("attempts %v, want one cancelled and nothing sent after", got)
		}
		if c := r.e.Counters(); c.Cancelled != 1 || c.Attempts["cancelled"] != 1 || c.Questions["cancelled"] != 1 {
			t.Fatalf("counters %+v", c)
		}
		notCharged(t, r, 1, 2)
	})
}

func TestBudgetClientGoesAway(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigScope(1))
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(700*time.Millisecond, cancel)
		start := time.Now()
		res := enginetest.Resolve(r.e, ctx, newQuery("x.example.", dns.TypeA))
		if res.Result != engine.ResultCancelled || time.Since(start) != 700*time.Millisecond {
			t.Fatalf("%v after %v, want cancelled when the client left at 700ms", res.Result, time.Since(start))
		}
		tx := r.net.Transactions()
		if len(tx) != 1 || tx[0].Closed.Sub(start) != 700*time.Millisecond {
			t.Fatalf("transactions %+v, want one closed at 700ms", tx)
		}
		if r.net.OpenSockets() != 0 {
			t.Fatal("socket left open")
		}
		notCharged(t, r, 1)
	})
}

func TestBudgetQuestionTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := rigScope(3)
		cfg.QuestionTimeout = 3 * time.Second
		r := newRig(t, cfg)
		start := time.Now()
		res := r.ask("x.example.")
		// Attempt 1: its own 2 s, charged. Attempt 2: cut at 3 s by the
		// question, not charged. No attempt 3.
		if got := r.log.outcomes(); !equalStrings(got, []string{"udp/timeout", "udp/cancelled"}) {
			t.Fatalf("attempts %v", got)
		}
		if res.Result != engine.ResultUnavailable || res.Reason != engine.ReasonQuestionTimeout || time.Since(start) != 3*time.Second {
			t.Fatalf("%v (%v) after %v, want unavailable (question timeout) at 3s", res.Result, res.Reason, time.Since(start))
		}
		if c := r.e.Counters(); c.UpstreamFailed != 1 || c.Cancelled != 1 {
			t.Fatalf("upstream_failed %d cancelled %d, want 1 and 1", c.UpstreamFailed, c.Cancelled)
		}
		if !r.demoted(rigServer(1)) || r.demoted(rigServer(2)) {
			t.Fatal("want server 1 demoted (its own timeout), server 2 not (cut by the question)")
		}
	})
}

func TestBudgetEarliestWins(t *testing.T) {
	cases := []struct {
		name     string
		client   time.Duration // 0: none
		question time.Duration // 0: none
		ends     time.Duration
		result   engine.Result
	}{
		{"transaction before both", 10 * time.Second, 9 * time.Second, 6 * time.Second, engine.ResultUnavailable},
		{"question before client", 5 * time.Second, 3 * time.Second, 3 * time.Second, engine.ResultUnavailable},
		{"client before question", 2500 * time.Millisecond, 3 * time.Second, 2500 * time.Millisecond, engine.ResultCancelled},
		{"client only", 1 * time.Second, 0, 1 * time.Second, engine.ResultCancelled},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := rigScope(1)
				cfg.QuestionTimeout = c.question
				r := newRig(t, cfg)
				ctx := context.Background()
				if c.client > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, c.client)
					defer cancel()
				}
				start := time.Now()
				res := enginetest.Resolve(r.e, ctx, newQuery("x.example.", dns.TypeA))
				if time.Since(start) != c.ends || res.Result != c.result {
					t.Fatalf("%v after %v, want %v after %v", res.Result, time.Since(start), c.result, c.ends)
				}
			})
		})
	}
}

func TestBudgetNoTimeLeftSendsNothing(t *testing.T) {
	t.Run("client already gone", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newRig(t, rigScope(1))
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			res := enginetest.Resolve(r.e, ctx, newQuery("x.example.", dns.TypeA))
			if n := len(r.net.Transactions()); n != 0 || res.Result != engine.ResultCancelled {
				t.Fatalf("%d transactions, %v; want nothing sent, cancelled", n, res.Result)
			}
		})
	})
	t.Run("client deadline passed", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newRig(t, rigScope(1))
			ctx, cancel := context.WithDeadline(context.Background(), time.Now())
			defer cancel()
			enginetest.Resolve(r.e, ctx, newQuery("x.example.", dns.TypeA))
			if n := len(r.net.Transactions()); n != 0 {
				t.Fatalf("%d transactions, want none", n)
			}
		})
	})
	t.Run("question budget spent by earlier attempts", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			cfg := rigScope(3)
			cfg.QuestionTimeout = 4 * time.Second
			r := newRig(t, cfg)
			res := r.ask("x.example.")
			// Two full timeouts use the 4 s; the third attempt is not sent.
			if n := len(r.net.Transactions()); n != 2 || res.Reason != engine.ReasonQuestionTimeout {
				t.Fatalf("%d transactions, %v; want 2 sent and the question timed out", n, res.Reason)
			}
		})
	})
}

// A client that goes away while a TCP retry is still connecting ends its
// question at once: the connect is abandoned (and closed when it
// completes), the attempt is cancelled, nothing is charged.
func TestBudgetClientGoesAwayDuringTCPConnect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigScope(1))
		r.net.Handle(rigServer(1), memnet.ByTransport(
			memnet.Respond(memnet.Truncated(dns.RcodeSuccess)),
			func(memnet.Conn) memnet.Action { return memnet.Action{OpenDelay: 1500 * time.Millisecond} },
		))
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(200*time.Millisecond, cancel)
		start := time.Now()
		res := enginetest.Resolve(r.e, ctx, newQuery("big.example.", dns.TypeTXT))
		if res.Result != engine.ResultCancelled || time.Since(start) != 200*time.Millisecond {
			t.Fatalf("%v after %v, want cancelled when the client left at 200ms", res.Result, time.Since(start))
		}
		if got := r.log.outcomes(); !equalStrings(got, []string{"udp/truncated", "tcp/cancelled"}) {
			t.Fatalf("attempts %v", got)
		}
		notCharged(t, r, 1)
		time.Sleep(2 * time.Second) // the abandoned connect completes and is closed
		if n := r.net.OpenSockets(); n != 0 {
			t.Fatalf("%d sockets left open", n)
		}
	})
}
