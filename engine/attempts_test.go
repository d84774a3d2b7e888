package engine_test

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/enginetest"
	"github.com/dohfwd/dohfwd/engine/memnet"
	"github.com/miekg/dns"
)

// The bounds table and "The attempt limit".

// engine-servers.transaction-timeout
func TestTransactionTimeout(t *testing.T) {
	if engine.DefaultTransactionTimeout != 2*time.Second {
		t.Fatalf("default transaction timeout %v, want 2s", engine.DefaultTransactionTimeout)
	}
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigScope(1))
		// A reply at 2 s - 1 ns is in time; the next transaction's reply
		// at exactly 2 s is not.
		r.net.Handle(rigServer(1), func(c memnet.Conn) memnet.Action {
			d := 2*time.Second - time.Nanosecond
			if c.N > 0 {
				d = 2 * time.Second
			}
			return memnet.Action{Replies: []memnet.Reply{memnet.After(d, memnet.Answer("@ 60 IN A 192.0.2.1"))}}
		})
		if res := r.ask("in-time.example."); res.Result != engine.ResultAnswer {
			t.Fatalf("reply at 2s-1ns: %v, want an answer", res.Result)
		}
		r.net.Reset()
		start := time.Now()
		res := r.ask("late.example.")
		if res.Result != engine.ResultUnavailable {
			t.Fatalf("replies at 2s: %v, want unavailable", res.Result)
		}
		for i, tx := range r.net.Transactions() {
			if d := tx.Closed.Sub(tx.Sent); d != 2*time.Second {
				t.Fatalf("transaction %d lasted %v after its send, want 2s", i, d)
			}
		}
		if d := time.Since(start); d != 6*time.Second {
			t.Fatalf("three timeouts took %v, want 6s", d)
		}
	})
}

// engine-servers.attempts-per-candidate
func TestAttemptsPerCandidate(t *testing.T) {
	if engine.DefaultAttempts != 3 {
		t.Fatalf("default attempts %d, want 3", engine.DefaultAttempts)
	}
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigScope(5))
		res := r.ask("x.example.")
		if n := len(r.net.Transactions()); n != 3 || res.Attempts != 3 {
			t.Fatalf("%d transactions, %d attempts reported; want 3 of 5 servers asked", n, res.Attempts)
		}
		// TCP retries count against the same three.
		r2 := newRig(t, rigScope(1))
		r2.net.Handle(rigServer(1), truncatedThen(memnet.Silent()))
		r2.ask("y.example.")
		want := []string{"udp/truncated", "tcp/timeout", "udp/truncated"}
		if got := r2.log.outcomes(); !equalStrings(got, want) {
			t.Fatalf("attempts %v, want %v", got, want)
		}
	})
}

// engine-servers.third-failure-is-unavailable
func TestThirdFailureIsUnavailable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigScope(3))
		r.net.Handle(rigServer(1), memnet.Respond(memnet.Rcode(dns.RcodeServerFailure)))
		r.net.Handle(rigServer(2), memnet.Fail("receive", engine.ErrRefused))
		// server 3 silent
		q := newQuery("x.example.", dns.TypeA)
		q.Id = 777
		res := enginetest.Resolve(r.e, t.Context(), q)
		if res.Result != engine.ResultUnavailable || res.Reason != engine.ReasonAttemptsSpent || res.Attempts != 3 {
			t.Fatalf("result %v (%v) after %d attempts, want unavailable (attempts spent) after 3", res.Result, res.Reason, res.Attempts)
		}
		m := res.Msg
		if m.Rcode != dns.RcodeServerFailure || m.Id != 777 || len(m.Question) != 1 {
			t.Fatalf("client reply rcode %d id %d question %v", m.Rcode, m.Id, m.Question)
		}
		if code := edeCode(m); code != int(dns.ExtendedErrorCodeNoReachableAuthority) {
			t.Fatalf("EDE %d, want 22 (No Reachable Authority)", code)
		}
		if c := r.e.Counters(); c.UpstreamFailed != 3 || c.Questions["unavailable"] != 1 {
			t.Fatalf("counters %+v", c)
		}
		// Not cached: the same question, with a cache on, goes upstream
		// again.
		cfg := rigScope(3)
		cfg.Cache.MaxEntries = 100
		r.e.Reconfigure(cfg)
		r.net.Reset()
		enginetest.Resolve(r.e, t.Context(), newQuery("x.example.", dns.TypeA))
		enginetest.Resolve(r.e, t.Context(), newQuery("x.example.", dns.TypeA))
		if n := len(r.net.Transactions()); n != 6 {
			t.Fatalf("%d transactions for two unavailable questions, want 6: unavailable is never cached", n)
		}
	})
}

func edeCode(m *dns.Msg) int {
	if o := m.IsEdns0(); o != nil {
		for _, op := range o.Option {
			if e, ok := op.(*dns.EDNS0_EDE); ok {
				return int(e.InfoCode)
			}
		}
	}
	return -1
}

// engine-servers.limit-is-per-question
func TestLimitIsPerQuestion(t *testing.T) {
	t.Run("each question has its own three", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newRig(t, rigScope(1))
			r.ask("a.example.")
			r.ask("b.example.")
			if n := len(r.net.Transactions()); n != 6 {
				t.Fatalf("%d transactions for two failing questions, want 3 each", n)
			}
		})
	})
	t.Run("the budget is shared by the candidates; NXDOMAIN spends none", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			cfg := rigScope(1)
			search := []string{"s1.example.", "s2.example.", "s3.example.", "s4.example.", "s5.example."}
			cfg.Scopes[0].Search = search
			r := newRig(t, cfg)
			// Every candidate but the bare name gets NXDOMAIN: all six
			// are asked, though there are more than three.
			r.net.Handle(rigServer(1), nxUnless("printer.", memnet.Answer("@ 60 IN A 192.0.2.9")))
			res := r.ask("printer.")
			var names []string
			for _, tx := range r.net.Transactions() {
				names = append(names, tx.Query.Question[0].Name)
			}
			want := []string{"printer.s1.example.", "printer.s2.example.", "printer.s3.example.", "printer.s4.example.", "printer.s5.example.", "printer."}
			if !equalStrings(names, want) {
				t.Fatalf("asked %v, want every candidate: %v", names, want)
			}
			if res.Result != engine.ResultAnswer {
				t.Fatalf("result %v, want the bare name's answer", res.Result)
			}

			// Failures spend the shared budget: the first candidate fails
			// twice, the second once, and the question is over.
			r.net.Reset()
			r.net.Handle(rigServer(1), func(c memnet.Conn) memnet.Action {
				return memnet.Action{Replies: []memnet.Reply{memnet.Rcode(dns.RcodeServerFailure)}}
			})
			res = r.ask("scanner.")
			names = names[:0]
			for _, tx := range r.net.Transactions() {
				names = append(names, tx.Query.Question[0].Name)
			}
			if len(names) != 3 || res.Result != engine.ResultUnavailable {
				t.Fatalf("asked %v with result %v; want three attempts in all, then unavailable", names, res.Result)
			}
		})
	})
	t.Run("cached answers spend no attempt", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			cfg := rigScope(1)
			cfg.Cache.MaxEntries = 100
			r := newRig(t, cfg)
			r.net.Handle(rigServer(1), memnet.Respond(memnet.Answer("@ 300 IN A 192.0.2.1")))
			r.ask("cached.example.")
			res := r.ask("cached.example.")
			if n := len(r.net.Transactions()); n != 1 || res.Attempts != 0 || !res.CacheHit {
				t.Fatalf("%d transactions, second question spent %d attempts, cache hit %v; want 1, 0, true", n, res.Attempts, res.CacheHit)
			}
		})
	})
}

// nxUnless answers NXDOMAIN to every name but name, which gets r.
func nxUnless(name string, r memnet.Reply) memnet.Handler {
	nx := memnet.Rcode(dns.RcodeNameError)
	return func(memnet.Conn) memnet.Action {
		return memnet.Action{Replies: []memnet.Reply{{Msg: func(q *dns.Msg) *dns.Msg {
			if strings.EqualFold(q.Question[0].Name, name) {
				return r.Msg(q)
			}
			return nx.Msg(q)
		}}}}
	}
}

// engine-servers.tcp-retry-spends-an-attempt
func TestTCPRetrySpendsAnAttempt(t *testing.T) {
	t.Run("TC then TCP to the same server, with its own 2 s", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newRig(t, rigScope(2))
			r.net.Handle(rigServer(1), truncatedThen(memnet.Respond(memnet.After(1999*time.Millisecond, memnet.Answer("@ 60 IN A 192.0.2.1")))))
			res := r.ask("x.example.")
			if want := []string{"udp/truncated", "tcp/answer"}; !equalStrings(r.log.outcomes(), want) {
				t.Fatalf("attempts %v, want %v", r.log.outcomes(), want)
			}
			txs := r.net.Transactions()
			if txs[1].Server != rigServer(1) || txs[1].Transport != engine.TCP {
				t.Fatalf("retry went to %v over %v, want server 1 over TCP", txs[1].Server, txs[1].Transport)
			}
			if res.Attempts != 2 || res.Result != engine.ResultAnswer {
				t.Fatalf("%d attempts, %v; want 2, answer", res.Attempts, res.Result)
			}
			r.net.Reset()
			r.net.Handle(rigServer(1), truncatedThen(memnet.Silent()))
			r.ask("y.example.")
			tcp := r.net.Transactions()[1]
			if d := tcp.Closed.Sub(tcp.Sent); d != 2*time.Second {
				t.Fatalf("TCP retry waited %v, want its own 2s", d)
			}
		})
	})
	t.Run("TC on the final attempt is unavailable", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newRig(t, rigScope(2))
			r.net.Handle(rigServer(1), func(c memnet.Conn) memnet.Action {
				if c.N == 0 {
					return memnet.Action{} // attempt 1: timeout
				}
				return memnet.Action{Replies: []memnet.Reply{memnet.Truncated(dns.RcodeSuccess)}} // attempt 3
			})
			// attempt 2: server 2 silent
			res := r.ask("x.example.")
			want := []string{"udp/timeout", "udp/timeout", "udp/truncated"}
			if got := r.log.outcomes(); !equalStrings(got, want) {
				t.Fatalf("attempts %v, want %v", got, want)
			}
			if res.Result != engine.ResultUnavailable || len(r.net.Transactions()) != 3 {
				t.Fatalf("result %v after %d transactions, want unavailable with no TCP", res.Result, len(r.net.Transactions()))
			}
		})
	})
}

// engine-servers.tcp-retry-spends-an-attempt: a TCP reply that still has
// TC set is the best the server can give; it is used, not retried again.
func TestTCPRetrySpendsAnAttemptTCWithTCIsUsed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigScope(2))
		r.net.Handle(rigServer(1), memnet.Respond(memnet.Truncated(dns.RcodeSuccess)))
		res := r.ask("big.example.")
		if res.Result != engine.ResultAnswer || res.Attempts != 2 {
			t.Fatalf("result %v after %d attempts, want answer after 2 (UDP TC, then TCP used)", res.Result, res.Attempts)
		}
		if got := r.log.outcomes(); !equalStrings(got, []string{"udp/truncated", "tcp/answer"}) {
			t.Fatalf("outcomes %v", got)
		}
	})
}
