package engine_test

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/enginetest"
	"github.com/dohfwd/dohfwd/engine/memnet"
	"github.com/miekg/dns"
)

// Transactions (transaction.go): fresh socket, random ID, matching, the
// upstream query's EDNS, the client's ID.

func TestTransactionFreshSocketAndRandomID(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigScope(1))
		ids := map[uint16]bool{}
		const questions = 70 // 210 transactions
		for i := range questions {
			q := newQuery("x.example.", dns.TypeA)
			q.Id = uint16(i) // the client's ID never reaches upstream
			enginetest.Resolve(r.e, t.Context(), q)
		}
		txs := r.net.Transactions()
		if len(txs) != 3*questions {
			t.Fatalf("%d transactions, want %d", len(txs), 3*questions)
		}
		for i, tx := range txs {
			if tx.Closed.IsZero() || tx.Query == nil {
				t.Fatalf("transaction %d: closed %v, query %v", i, tx.Closed, tx.Query)
			}
			ids[tx.Query.Id] = true
		}
		// 210 draws from 65536: a handful of repeats at most by chance;
		// a counter or a fixed ID would give far fewer distinct values,
		// and the client's IDs 0..69 would give 70.
		if len(ids) < 3*questions-10 {
			t.Fatalf("%d distinct IDs in %d transactions: not random per transaction", len(ids), len(txs))
		}
		if n := r.net.OpenSockets(); n != 0 {
			t.Fatalf("%d sockets left open", n)
		}
	})
}

// TestReplyMatching sends, for each way a reply can fail to match, that
// reply at 100 ms and the right one at 1.5 s: the right one is used. With
// only the wrong one, the transaction times out at its original 2 s.
func TestReplyMatching(t *testing.T) {
	good := memnet.Answer("@ 60 IN A 192.0.2.1")
	stranger := netip.MustParseAddrPort("127.0.1.200:53")
	otherPort := netip.AddrPortFrom(rigServer(1).Addr(), 5353)
	cases := []struct {
		name  string
		reply memnet.Reply
	}{
		{"wrong ID", memnet.WrongID(good)},
		{"QR unset", memnet.Edit(good, func(m *dns.Msg) { m.Response = false })},
		{"opcode NOTIFY", memnet.Edit(good, func(m *dns.Msg) { m.Opcode = dns.OpcodeNotify })},
		{"opcode UPDATE", memnet.Edit(good, func(m *dns.Msg) { m.Opcode = dns.OpcodeUpdate })},
		{"other name", memnet.Edit(good, func(m *dns.Msg) { m.Question[0].Name = "y.example." })},
		{"other type", memnet.Edit(good, func(m *dns.Msg) { m.Question[0].Qtype = dns.TypeAAAA })},
		{"other class", memnet.Edit(good, func(m *dns.Msg) { m.Question[0].Qclass = dns.ClassCHAOS })},
		{"no question", memnet.Edit(good, func(m *dns.Msg) { m.Question = nil })},
		{"two questions", memnet.Edit(good, func(m *dns.Msg) { m.Question = append(m.Question, m.Question[0]) })},
		{"from another address", memnet.FromAddr(stranger, good)},
		{"from another port", memnet.FromAddr(otherPort, good)},
		{"garbage", memnet.Garbage()},
		{"header only", memnet.Reply{Raw: make([]byte, 12)}},
		{"empty", memnet.Reply{Raw: []byte{}}},
		{"a failure rcode with a wrong ID", memnet.WrongID(memnet.Rcode(dns.RcodeServerFailure))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newRig(t, rigScope(1))
				r.net.Handle(rigServer(1), memnet.Respond(memnet.After(100*time.Millisecond, c.reply), memnet.After(1500*time.Millisecond, good)))
				start := time.Now()
				res := r.ask("x.example.")
				if res.Result != engine.ResultAnswer || res.Attempts != 1 || time.Since(start) != 1500*time.Millisecond {
					t.Fatalf("%v after %d attempts and %v; want the good reply at 1.5s", res.Result, res.Attempts, time.Since(start))
				}
				if n := r.e.Counters().MismatchedReplies; n != 1 {
					t.Fatalf("mismatched_replies = %d, want 1", n)
				}
				r.net.Reset()
				r.net.Handle(rigServer(1), memnet.Respond(memnet.After(100*time.Millisecond, c.reply), memnet.After(1900*time.Millisecond, c.reply)))
				cfg := rigScope(1)
				cfg.Attempts = 1
				r.e.Reconfigure(cfg)
				start = time.Now()
				res = r.ask("x.example.")
				if res.Result != engine.ResultUnavailable || time.Since(start) != 2*time.Second {
					t.Fatalf("only mismatched replies: %v after %v, want a timeout at the original 2s", res.Result, time.Since(start))
				}
				if a := r.log.attemptList(); a[len(a)-1].Outcome != engine.OutcomeTimeout {
					t.Fatalf("outcome %v, want timeout", a[len(a)-1].Outcome)
				}
				if n := r.e.Counters().MismatchedReplies; n != 3 {
					t.Fatalf("mismatched_replies = %d, want 3", n)
				}
			})
		})
	}
	t.Run("the name matches without regard to case", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newRig(t, rigScope(1))
			r.net.Handle(rigServer(1), memnet.Respond(memnet.Edit(good, func(m *dns.Msg) {
				m.Question[0].Name = strings.ToUpper(m.Question[0].Name)
			})))
			if res := r.ask("MiXeD.Example."); res.Result != engine.ResultAnswer || r.e.Counters().MismatchedReplies != 0 {
				t.Fatalf("%v, mismatched %d; want the reply matched", res.Result, r.e.Counters().MismatchedReplies)
			}
		})
	})
	t.Run("over TCP", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newRig(t, rigScope(1))
			r.net.Handle(rigServer(1), truncatedThen(memnet.Respond(memnet.WrongID(good), memnet.Garbage(), memnet.After(time.Second, good))))
			if res := r.ask("x.example."); res.Result != engine.ResultAnswer || r.e.Counters().MismatchedReplies != 2 {
				t.Fatalf("%v, mismatched %d; want the third message used, two ignored", res.Result, r.e.Counters().MismatchedReplies)
			}
		})
	})
}

func TestUpstreamQueryEDNS(t *testing.T) {
	ecs := func() *dns.EDNS0_SUBNET {
		return &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: 24, Address: net.IPv4(198, 51, 100, 0).To4()}
	}
	cases := []struct {
		name              string
		do, cd, ecs, edns bool
		forwardECS        bool
	}{
		{name: "no EDNS from the client"},
		{name: "EDNS, no bits", edns: true},
		{name: "DO", edns: true, do: true},
		{name: "CD", cd: true},
		{name: "DO and CD", edns: true, do: true, cd: true},
		{name: "ECS dropped", edns: true, ecs: true},
		{name: "ECS forwarded", edns: true, ecs: true, forwardECS: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := rigScope(1)
				cfg.ForwardECS = c.forwardECS
				r := newRig(t, cfg)
				r.net.Handle(rigServer(1), memnet.Respond(memnet.Answer("@ 60 IN A 192.0.2.1")))
				q := newQuery("x.example.", dns.TypeA)
				q.Id = 0xBEEF
				q.CheckingDisabled = c.cd
				if c.edns {
					q.SetEdns0(4096, c.do)
					if c.ecs {
						o := q.IsEdns0()
						o.Option = append(o.Option, ecs())
					}
				}
				res := enginetest.Resolve(r.e, t.Context(), q)
				up := r.net.Transactions()[0].Query
				opt := up.IsEdns0()
				if opt == nil || opt.UDPSize() != 1232 {
					t.Fatalf("upstream OPT %v, want EDNS0 with UDP size 1232", opt)
				}
				if opt.Do() != c.do || up.CheckingDisabled != c.cd || !up.RecursionDesired {
					t.Fatalf("upstream DO %v CD %v RD %v, want DO %v CD %v RD true", opt.Do(), up.CheckingDisabled, up.RecursionDesired, c.do, c.cd)
				}
				var sent bool
				for _, o := range opt.Option {
					if o.Option() == dns.EDNS0SUBNET {
						sent = true
					}
				}
				if want := c.ecs && c.forwardECS; sent != want {
					t.Fatalf("ECS upstream %v, want %v", sent, want)
				}
				if up.Id == 0xBEEF && r.net.Transactions()[0].Query.Id == q.Id {
					t.Log("upstream ID equals the client's by chance")
				}
				if res.Msg.Id != 0xBEEF {
					t.Fatalf("client got ID %#x, want its own 0xBEEF", res.Msg.Id)
				}
				if !c.edns && res.Msg.IsEdns0() != nil {
					t.Fatal("a client without EDNS got an OPT record")
				}
			})
		})
	}
}
