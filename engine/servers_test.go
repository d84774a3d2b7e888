package engine_test

import (
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/memnet"
	"github.com/miekg/dns"
)

// Rules of "Choosing the server": order, choice, one server, recomputed
// order, one attempt at a time.

// engine-servers.healthy-first-then-demoted
func TestHealthyFirstThenDemoted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigScope(4))
		// Question 1: servers 1-3 refuse, so they are demoted; 4 is never
		// asked and stays healthy.
		for i := 1; i <= 4; i++ {
			r.net.Handle(rigServer(i), memnet.Respond(memnet.Rcode(dns.RcodeRefused)))
		}
		r.ask("one.example.")
		want := []netip.AddrPort{rigServer(1), rigServer(2), rigServer(3)}
		if got := r.servers(); !equalAddrs(got, want) {
			t.Fatalf("question 1 asked %v, want %v", got, want)
		}
		// Question 2: the healthy server 4 first, then the demoted ones
		// in configured order.
		r.net.Reset()
		r.ask("two.example.")
		want = []netip.AddrPort{rigServer(4), rigServer(1), rigServer(2)}
		if got := r.servers(); !equalAddrs(got, want) {
			t.Fatalf("question 2 asked %v, want healthy 4 then demoted 1, 2: %v", got, want)
		}
	})
}

// engine-servers.server-choice-rule
func TestServerChoiceRule(t *testing.T) {
	t.Run("two servers: A, B, then A", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newRig(t, rigScope(2))
			r.ask("x.example.") // both silent: every attempt times out
			want := []netip.AddrPort{rigServer(1), rigServer(2), rigServer(1)}
			if got := r.servers(); !equalAddrs(got, want) {
				t.Fatalf("asked %v, want %v", got, want)
			}
		})
	})
	t.Run("first not yet asked, skipping the demoted", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newRig(t, rigScope(3))
			r.net.Handle(rigServer(1), memnet.Respond(memnet.Rcode(dns.RcodeServerFailure)))
			r.net.Handle(rigServer(2), memnet.Respond(memnet.Answer("@ 60 IN A 192.0.2.2")))
			r.ask("a.example.") // 1 fails (demoted), 2 answers
			r.net.Reset()
			r.net.Handle(rigServer(2), memnet.Respond(memnet.Rcode(dns.RcodeServerFailure)))
			r.ask("b.example.")
			// Order now 2, 3 (healthy), 1 (demoted): 2 fails and is demoted,
			// then the first not yet asked in the new order 3, 1, 2 is 3.
			want := []netip.AddrPort{rigServer(2), rigServer(3), rigServer(1)}
			if got := r.servers(); !equalAddrs(got, want) {
				t.Fatalf("asked %v, want %v", got, want)
			}
		})
	})
	t.Run("n mod count once all were asked", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			cfg := rigScope(2)
			cfg.Attempts = 5 // enough attempts to wrap around twice
			r := newRig(t, cfg)
			r.ask("x.example.")
			// All demoted keep configured order: positions 2%2, 3%2, 4%2.
			s1, s2 := rigServer(1), rigServer(2)
			want := []netip.AddrPort{s1, s2, s1, s2, s1}
			if got := r.servers(); !equalAddrs(got, want) {
				t.Fatalf("asked %v, want %v", got, want)
			}
		})
	})
	t.Run("n mod count in the current order", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			cfg := rigScope(2)
			cfg.Attempts = 4
			r := newRig(t, cfg)
			// 1 fails and is demoted; 2 hits a local error, which does not
			// demote. Order for attempts 3 and 4: 2, 1.
			r.net.Handle(rigServer(1), memnet.Respond(memnet.Rcode(dns.RcodeRefused)))
			r.net.Handle(rigServer(2), memnet.Fail("open", engine.ErrLocal))
			r.ask("x.example.")
			s1, s2 := rigServer(1), rigServer(2)
			want := []netip.AddrPort{s1, s2, s2, s1} // n=2 → position 0 (2), n=3 → position 1 (1)
			if got := r.servers(); !equalAddrs(got, want) {
				t.Fatalf("asked %v, want %v", got, want)
			}
		})
	})
}

// engine-servers.single-server-gets-every-attempt
func TestSingleServerGetsEveryAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigScope(1))
		res := r.ask("x.example.")
		s := rigServer(1)
		if got := r.servers(); !equalAddrs(got, []netip.AddrPort{s, s, s}) {
			t.Fatalf("asked %v, want the one server three times", got)
		}
		if res.Result != engine.ResultUnavailable || res.Attempts != 3 {
			t.Fatalf("result %v after %d attempts, want unavailable after 3", res.Result, res.Attempts)
		}
	})
}

// engine-servers.order-recomputed-each-attempt
func TestOrderRecomputedEachAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigScope(3))
		// Server 2 fails once: demoted for 30 s.
		r.net.Handle(rigServer(2), memnet.Respond(memnet.Rcode(dns.RcodeRefused)))
		r.net.Handle(rigServer(1), memnet.Fail("send", engine.ErrLocal))
		cfg := rigScope(3)
		cfg.Attempts = 2
		r.e.Reconfigure(cfg)
		r.ask("setup.example.") // 1: local error (no demotion), then 2: refused
		if !r.demoted(rigServer(2)) || r.demoted(rigServer(1)) {
			t.Fatal("set-up did not demote exactly server 2")
		}
		r.e.Reconfigure(rigScope(3))
		r.net.Reset()
		r.net.Handle(rigServer(1), memnet.Silent())
		time.Sleep(29 * time.Second)
		// Attempt 1 (order 1, 3, 2) goes to 1 and times out at +31 s; by
		// then 2's mark has run out, so the order computed for attempt 2
		// is 2, 3, 1 and 2 is asked before 3. An order kept from the
		// start would ask 3.
		r.ask("x.example.")
		want := []netip.AddrPort{rigServer(1), rigServer(2), rigServer(3)}
		if got := r.servers(); !equalAddrs(got, want) {
			t.Fatalf("asked %v, want %v", got, want)
		}

		// The order a stale snapshot would get wrong: with 2 servers and 4
		// attempts, 1 is demoted by attempt 1 and 2 keeps healthy (local
		// errors do not demote), so attempts 3 and 4 go to 2 then 1; a
		// snapshot taken before attempt 1 would give 1 then 2.
		cfg = rigScope(2)
		cfg.Attempts = 4
		r2 := newRig(t, cfg)
		r2.net.Handle(rigServer(1), memnet.Respond(memnet.Rcode(dns.RcodeRefused)))
		r2.net.Handle(rigServer(2), memnet.Fail("send", engine.ErrLocal))
		r2.ask("y.example.")
		want = []netip.AddrPort{rigServer(1), rigServer(2), rigServer(2), rigServer(1)}
		if got := r2.servers(); !equalAddrs(got, want) {
			t.Fatalf("asked %v, want %v", got, want)
		}
	})
}

// engine-servers.attempts-sequential
func TestAttemptsSequential(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigScope(3))
		// Replies come after the 2 s timeout: a transaction must end
		// before the next is opened, never overlap.
		for i := 1; i <= 3; i++ {
			r.net.Handle(rigServer(i), memnet.Respond(memnet.After(3*time.Second, memnet.Answer("@ 60 IN A 192.0.2.1"))))
		}
		start := time.Now()
		r.ask("x.example.")
		txs := r.net.Transactions()
		if len(txs) != 3 {
			t.Fatalf("%d transactions, want 3", len(txs))
		}
		for i, tx := range txs {
			if tx.Closed.IsZero() {
				t.Fatalf("transaction %d never closed", i)
			}
			if i > 0 && tx.Opened.Before(txs[i-1].Closed) {
				t.Fatalf("transaction %d opened at %v, before %d closed at %v", i, tx.Opened.Sub(start), i-1, txs[i-1].Closed.Sub(start))
			}
			if want := start.Add(time.Duration(i) * 2 * time.Second); !tx.Opened.Equal(want) {
				t.Fatalf("transaction %d opened at +%v, want +%v", i, tx.Opened.Sub(start), want.Sub(start))
			}
		}
		if n := r.net.OpenSockets(); n != 0 {
			t.Fatalf("%d sockets left open", n)
		}
	})
}

// engine-servers.demoted-servers-still-asked
func TestDemotedServersStillAsked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigScope(2))
		r.ask("x.example.") // both silent: both demoted
		if !r.demoted(rigServer(1)) || !r.demoted(rigServer(2)) {
			t.Fatal("servers not demoted by timeouts")
		}
		r.net.Reset()
		r.net.Handle(rigServer(2), memnet.Respond(memnet.Answer("@ 60 IN A 192.0.2.2")))
		res := r.ask("y.example.")
		want := []netip.AddrPort{rigServer(1), rigServer(2)}
		if got := r.servers(); !equalAddrs(got, want) {
			t.Fatalf("asked %v, want the demoted servers in order %v", got, want)
		}
		if res.Result != engine.ResultAnswer {
			t.Fatalf("result %v, want the demoted server's answer", res.Result)
		}
	})
}

// engine-servers.server-choice-rule holds for a scope longer than the
// engine's stack scratch space (16 servers).
func TestServerChoiceRuleWithManyServers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigScope(20))
		r.net.Handle(rigServer(1), memnet.Silent())
		r.net.Handle(rigServer(2), memnet.Silent())
		for i := 3; i <= 20; i++ {
			r.net.Handle(rigServer(i), memnet.Respond(memnet.Answer("@ 60 IN A 192.0.2.3")))
		}
		if res := r.ask("many.example."); res.Result != engine.ResultAnswer || res.Attempts != 3 {
			t.Fatalf("%v after %d attempts, want an answer on the third", res.Result, res.Attempts)
		}
		want := []netip.AddrPort{rigServer(1), rigServer(2), rigServer(3)}
		if got := r.servers(); !equalAddrs(got, want) {
			t.Fatalf("asked %v, want %v", got, want)
		}
		// Next question: the two demoted servers go behind the other 18.
		r.net.Reset()
		r.ask("again.example.")
		if got := r.servers(); !equalAddrs(got, []netip.AddrPort{rigServer(3)}) {
			t.Fatalf("asked %v, want server 3 first", got)
		}
	})
}
