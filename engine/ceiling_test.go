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

// Rules of "The in-flight ceiling".

// fill starts n questions to the silent server rigServer(silent) (each its
// own name, so nothing merges them) and waits until they are all waiting
// upstream. They finish on their own when their attempts time out.
func fill(t *testing.T, r *rig, n int, scopeName string) {
	t.Helper()
	before := r.e.InFlight()
	for i := range n {
		q := newQuery(fmt.Sprintf("fill%d.%s", i, scopeName), dns.TypeA)
		r.bg.Go(func() { enginetest.Resolve(r.e, context.Background(), q) })
	}
	synctest.Wait()
	if got := r.e.InFlight(); got != before+int64(n) {
		t.Fatalf("in flight %d after starting %d, want %d", got, n, before+int64(n))
	}
}

// engine-servers.in-flight-ceiling-value
func TestInFlightCeilingValue(t *testing.T) {
	if engine.DefaultInFlightCeiling != 4096 {
		t.Fatalf("default ceiling %d, want 4096", engine.DefaultInFlightCeiling)
	}
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigScope(1)) // server 1 silent
		if c := r.e.Status().InFlightCeiling; c != 4096 {
			t.Fatalf("status ceiling %d, want 4096", c)
		}
		fill(t, r, 4095, "example.")
		if r.e.Counters().Refused != 0 {
			t.Fatal("refused below the ceiling")
		}
		fill(t, r, 1, "last.example.") // the 4096th is sent
		if got := r.e.InFlight(); got != 4096 || r.e.Status().InFlight != 4096 {
			t.Fatalf("in flight %d, want 4096", got)
		}
		res := r.ask("refused.example.")
		if res.Result != engine.ResultUnavailable || res.Reason != engine.ReasonInFlightCeiling {
			t.Fatalf("at 4096 in flight: %v (%v), want refused", res.Result, res.Reason)
		}
		if c := r.e.Counters().Refused; c != 1 {
			t.Fatalf("refused = %d, want 1", c)
		}
	})
}

// engine-servers.in-flight-ceiling-refuses-new-transactions
func TestInFlightCeilingRefusesNewTransactions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := rigScope(1)
		cfg.InFlightCeiling = 2
		cfg.Scopes = append(cfg.Scopes, engine.ScopeConfig{Name: "empty", Domains: []string{"empty.example."}})
		r := newRig(t, cfg)
		fill(t, r, 2, "example.")
		r.net.Reset()
		start := time.Now()
		q := newQuery("x.example.", dns.TypeA)
		q.Id = 99
		res := enginetest.Resolve(r.e, context.Background(), q)
		if res.Result != engine.ResultUnavailable || res.Reason != engine.ReasonInFlightCeiling || time.Since(start) != 0 {
			t.Fatalf("%v (%v) after %v, want unavailable (ceiling) at once", res.Result, res.Reason, time.Since(start))
		}
		if n := len(r.net.Transactions()); n != 0 || res.Attempts != 0 {
			t.Fatalf("%d transactions opened, %d attempts; want none", n, res.Attempts)
		}
		if c := r.e.Counters().Refused; c != 1 {
			t.Fatalf("refused = %d, want 1", c)
		}
		if m := res.Msg; m.Rcode != dns.RcodeServerFailure || m.Id != 99 || edeCode(m) != int(dns.ExtendedErrorCodeOther) || edeText(m) != "in-flight ceiling" {
			t.Fatalf("client reply rcode %d id %d EDE %d %q", m.Rcode, m.Id, edeCode(m), edeText(m))
		}
		// A scope with no servers is unavailable before the ceiling is
		// looked at, and is not refused.
		res = r.ask("host.empty.example.")
		if res.Result != engine.ResultUnavailable || res.Reason != engine.ReasonNoServers {
			t.Fatalf("empty scope at the ceiling: %v (%v), want unavailable (no servers)", res.Result, res.Reason)
		}
		if edeCode(res.Msg) != int(dns.ExtendedErrorCodeNoReachableAuthority) || edeText(res.Msg) != "no servers" {
			t.Fatalf("empty scope EDE %d %q", edeCode(res.Msg), edeText(res.Msg))
		}
		if c := r.e.Counters().Refused; c != 1 {
			t.Fatalf("refused = %d after the empty scope, want still 1", c)
		}
		// Once the transactions end, the slots are free again.
		time.Sleep(7 * time.Second)
		if r.e.InFlight() != 0 {
			t.Fatalf("in flight %d after every question ended", r.e.InFlight())
		}
		r.net.Handle(rigServer(1), memnet.Respond(memnet.Answer("@ 60 IN A 192.0.2.1")))
		if res := r.ask("after.example."); res.Result != engine.ResultAnswer {
			t.Fatalf("after the load: %v", res.Result)
		}
	})
}

func edeText(m *dns.Msg) string {
	if o := m.IsEdns0(); o != nil {
		for _, op := range o.Option {
			if e, ok := op.(*dns.EDNS0_EDE); ok {
				return e.ExtraText
			}
		}
	}
	return ""
}

// engine-servers.retries-checked-against-ceiling
func TestRetriesCheckedAgainstCeiling(t *testing.T) {
	// Each case runs question "q1" on the root goroutine with a ceiling of
	// 1; when q1's attempt number `at` ends, another question takes the
	// free slot before q1 can send again.
	run := func(t *testing.T, server memnet.Handler, at int) (enginetest.Response, *rig) {
		cfg := rigScope(2)
		cfg.InFlightCeiling = 1
		// The other question goes to a silent server of its own.
		cfg.Scopes = append(cfg.Scopes, engine.ScopeConfig{Name: "other", Domains: []string{"other.example."}, Servers: []string{rigServer(3).String()}})
		r := newRig(t, cfg)
		r.net.Handle(rigServer(1), server)
		r.net.Handle(rigServer(2), memnet.Respond(memnet.Rcode(dns.RcodeRefused)))
		if at > 0 {
			r.log.onAttempt = func(ev engine.AttemptEvent) {
				if ev.QName == "q1.example." && ev.Attempt == at {
					fill(t, r, 1, "other.example.")
				}
			}
		}
		return r.ask("q1.example."), r
	}
	t.Run("a retry can reuse its own slot at capacity", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			res, r := run(t, memnet.Respond(memnet.Rcode(dns.RcodeServerFailure)), 0)
			if res.Reason != engine.ReasonAttemptsSpent || len(r.net.Transactions()) != 3 || r.e.Counters().Refused != 0 {
				t.Fatalf("%v after %d transactions, refused %d; want all three sent", res.Reason, len(r.net.Transactions()), r.e.Counters().Refused)
			}
		})
	})
	t.Run("a later attempt is refused", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			res, r := run(t, memnet.Respond(memnet.Rcode(dns.RcodeServerFailure)), 1)
			if res.Reason != engine.ReasonInFlightCeiling || res.Attempts != 1 || r.e.Counters().Refused != 1 {
				t.Fatalf("%v after %d attempts, refused %d; want refused after 1", res.Reason, res.Attempts, r.e.Counters().Refused)
			}
		})
	})
	t.Run("a TCP retry is refused", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			res, r := run(t, truncatedThen(memnet.Respond(memnet.Answer("@ 60 IN A 192.0.2.1"))), 1)
			if res.Reason != engine.ReasonInFlightCeiling || r.e.Counters().Refused != 1 {
				t.Fatalf("%v, refused %d; want the TCP retry refused", res.Reason, r.e.Counters().Refused)
			}
			for _, tx := range r.net.Transactions() {
				if tx.Transport == engine.TCP {
					t.Fatal("a TCP transaction was opened past the ceiling")
				}
			}
		})
	})
	t.Run("budget exhaustion is checked first", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			res, r := run(t, memnet.Respond(memnet.Rcode(dns.RcodeServerFailure)), 3)
			if res.Reason != engine.ReasonAttemptsSpent || r.e.Counters().Refused != 0 {
				t.Fatalf("%v, refused %d; want attempts spent, not refused", res.Reason, r.e.Counters().Refused)
			}
		})
	})
	t.Run("TC on the last attempt at capacity is not refused", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			res, r := run(t, func(c memnet.Conn) memnet.Action {
				if c.N == 0 {
					return memnet.Action{Replies: []memnet.Reply{memnet.Rcode(dns.RcodeServerFailure)}}
				}
				return memnet.Action{Replies: []memnet.Reply{memnet.Truncated(dns.RcodeSuccess)}}
			}, 3)
			if res.Result != engine.ResultUnavailable || res.Reason == engine.ReasonInFlightCeiling || r.e.Counters().Refused != 0 {
				t.Fatalf("%v (%v), refused %d; want unavailable, not refused", res.Result, res.Reason, r.e.Counters().Refused)
			}
		})
	})
}

// engine-servers.local-answers-unaffected-by-ceiling
func TestLocalAnswersUnaffectedByCeiling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := rigScope(2)
		cfg.InFlightCeiling = 1
		cfg.Cache.MaxEntries = 100
		cfg.Hosts = map[string][]string{"printer.lan.": {"192.0.2.50"}}
		r := newRig(t, cfg)
		r.net.Handle(rigServer(1), memnet.Respond(memnet.Answer("@ 300 IN A 192.0.2.1")))
		if res := r.ask("cached.example."); res.Result != engine.ResultAnswer {
			t.Fatalf("warming the cache: %v", res.Result)
		}
		r.net.Handle(rigServer(1), memnet.Silent())
		fill(t, r, 1, "example.")
		r.net.Reset()

		for _, name := range []string{"localhost.", "db.localhost.", "cached.example.", "printer.lan."} {
			res := r.ask(name)
			if res.Result != engine.ResultLocal || res.Msg.Rcode != dns.RcodeSuccess || len(res.Msg.Answer) == 0 {
				t.Errorf("%s at the ceiling: %v (%v), rcode %d, %d answers; want a local answer", name, res.Result, res.Reason, res.Msg.Rcode, len(res.Msg.Answer))
			}
		}
		if res := r.ask("nothing.invalid."); res.Result != engine.ResultLocal || res.Msg.Rcode != dns.RcodeNameError {
			t.Errorf("nothing.invalid. at the ceiling: %v rcode %d, want local NXDOMAIN", res.Result, res.Msg.Rcode)
		}
		if n := len(r.net.Transactions()); n != 0 || r.e.Counters().Refused != 0 {
			t.Fatalf("%d transactions, refused %d; local answers need neither", n, r.e.Counters().Refused)
		}
		// And a question that does need upstream is refused meanwhile.
		if res := r.ask("uncached.example."); res.Reason != engine.ReasonInFlightCeiling {
			t.Fatalf("uncached at the ceiling: %v (%v)", res.Result, res.Reason)
		}
	})
}
