package engine_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/memnet"
	"github.com/miekg/dns"
)

// A started miss finished without a goroutine: the edge
// module learns of the started transaction's reply from its host's read
// event and hands it to FinishStarted, which ends the question there when
// the reply ends it on its own, exactly as ResolveWireMiss would have.

// readStarted reads the started transaction's first datagram as the edge
// module's host would, into StartedWait's buffer.
func readStarted(t *testing.T, m *engine.Miss) ([]byte, netip.AddrPort) {
	t.Helper()
	sock, buf, deadline, ok := m.StartedWait()
	if !ok {
		t.Fatal("StartedWait: no started transaction waits")
	}
	n, from, err := sock.Receive(buf, deadline)
	if err != nil {
		t.Fatalf("the started socket's receive: %v", err)
	}
	return buf[:n], from
}

// An answer read for a started question ends it in FinishStarted as in
// ResolveWireMiss: the same reply and client ID, one attempt with its one
// event and RTT from the send, the same question event, counters, the
// flight landed for a goroutine follower and a JoinWire waiter, the
// answer cached (with the cache on), and one transaction for all.
func TestFinishStartedEndsQuestionAsResolveWireMiss(t *testing.T) {
	for _, cache := range []int{-1, 1000} {
		t.Run(fmt.Sprintf("cache%d", cache), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := rigScope(2)
				cfg.Cache.MaxEntries = cache
				r := newRig(t, cfg)
				r.net.Handle(rigServer(1), memnet.Respond(memnet.After(10*time.Millisecond, memnet.Answer("@ 60 IN A 192.0.2.1"))))
				want := map[string]engine.Response{}
				for _, how := range []string{"blocking", "finished"} {
					name := how + ".example."
					m := startMiss(t, r.e, context.Background(), queryFor(name, dns.TypeA))
					follower := make(chan engine.Response, 1)
					go func() { follower <- r.e.ResolveWire(context.Background(), mustPack(t, queryFor(name, dns.TypeA)), nil) }()
					synctest.Wait()
					j, _ := tryJoin(t, r.e, new(engine.CancelContext), queryFor(name, dns.TypeA))
					if j == nil {
						t.Fatalf("%s: JoinWire did not join the started flight", how)
					}
					var resp engine.Response
					if how == "blocking" {
						resp = r.e.ResolveWireMiss(context.Background(), m, nil)
					} else {
						reply, from := readStarted(t, m)
						var ok bool
						if resp, ok = r.e.FinishStarted(context.Background(), m, reply, from, nil); !ok {
							t.Fatal("FinishStarted did not take a matching answer")
						}
						if m.Ready() || m.Started() {
							t.Fatal("FinishStarted left the miss full")
						}
					}
					msg := unpackReply(t, resp)
					if resp.Result != engine.ResultAnswer || resp.Attempts != 1 || resp.Shared || msg.Id != 0xbeef ||
						len(msg.Answer) != 1 || msg.Answer[0].(*dns.A).A.String() != "192.0.2.1" {
						t.Fatalf("%s: got %v, %d attempts, shared %v, id %#x, answer %v", how, resp.Result, resp.Attempts, resp.Shared, msg.Id, msg.Answer)
					}
					for _, f := range []engine.Response{<-follower, j.wait()} {
						if f.Result != engine.ResultAnswer || !f.Shared || f.Attempts != 0 {
							t.Fatalf("%s: follower got %v shared %v attempts %d; want the leader's answer", how, f.Result, f.Shared, f.Attempts)
						}
					}
					want[how] = resp
				}
				if n := len(r.net.Transactions()); n != 2 {
					t.Fatalf("%d transactions, want one a question", n)
				}
				evs := r.log.attemptList()
				if len(evs) != 2 {
					t.Fatalf("attempt events %+v, want one a question", evs)
				}
				for _, ev := range evs {
					if ev.Outcome != engine.OutcomeAnswer || ev.Attempt != 1 || ev.Server != rigServer(1) || ev.RTT != 10*time.Millisecond || ev.Demoted {
						t.Fatalf("attempt event %+v; want an answer from %v, RTT 10ms", ev, rigServer(1))
					}
				}
				qs := r.log.questionList()
				var leaders []engine.QuestionEvent
				for _, q := range qs {
					if q.Attempts == 1 {
						leaders = append(leaders, q)
					}
				}
				if len(leaders) != 2 || leaders[0].Duration != leaders[1].Duration || leaders[1].Duration != 10*time.Millisecond ||
					leaders[1].Question != want["finished"].Question {
					t.Fatalf("leaders' question events %+v; want two alike, 10ms", leaders)
				}
				c := r.e.Counters()
				if c.Attempts["answer"] != 2 || c.Questions["answer"] != 6 || c.MismatchedReplies != 0 || c.UpstreamFailed != 0 {
					t.Fatalf("counters %+v; want 2 answered attempts, 6 answered questions", c)
				}
				if cache > 0 {
					if _, ok := r.e.ResolveWireImmediate(mustPack(t, queryFor("finished.example.", dns.TypeA)), nil, nil, nil); !ok {
						t.Fatal("the finished question's answer was not cached")
					}
				}
			})
		})
	}
}

// Every reply that does not end the question on its own, and a question
// whose client left or whose configuration changed, is left to
// ResolveWireMiss: FinishStarted reports false having done nothing (no
// counter, no event, the miss still started), and ResolveWireMiss then
// ends the question under the usual rules.
func TestFinishStartedLeavesEveryOtherEndToResolveWireMiss(t *testing.T) {
	answer := memnet.Answer("@ 60 IN A 192.0.2.1")
	cases := []struct {
		name  string
		reply memnet.Reply
		setup func(r *rig, cc *engine.CancelContext)
	}{
		{"servfail", memnet.Rcode(dns.RcodeServerFailure), nil},
		{"refused", memnet.Rcode(dns.RcodeRefused), nil},
		{"truncated", memnet.Truncated(dns.RcodeSuccess), nil},
		{"mismatched ID", memnet.WrongID(answer), nil},
		{"garbage", memnet.Garbage(), nil},
		{"other peer", memnet.FromAddr(rigServer(9), answer), nil},
		{"client gone", answer, func(r *rig, cc *engine.CancelContext) { cc.Cancel() }},
		{"reload", answer, func(r *rig, cc *engine.CancelContext) {
			if err := r.e.Reconfigure(rigScope(2)); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newRig(t, rigScope(2))
				r.net.Handle(rigServer(1), memnet.Respond(tc.reply))
				r.net.Handle(rigServer(2), memnet.Respond(memnet.Answer("@ 60 IN A 192.0.2.2")))
				cc := new(engine.CancelContext)
				m := startMiss(t, r.e, cc, queryFor("other.example.", dns.TypeA))
				sock, buf, deadline, _ := m.StartedWait()
				n, from, err := sock.Receive(buf, deadline)
				if err != nil {
					t.Fatal(err)
				}
				if tc.setup != nil {
					tc.setup(r, cc)
				}
				if _, ok := r.e.FinishStarted(cc, m, buf[:n], from, nil); ok {
					t.Fatal("FinishStarted ended the question")
				}
				c := r.e.Counters()
				if !m.Started() || len(r.log.attemptList()) != 0 || len(r.log.questionList()) != 0 || c.MismatchedReplies != 0 || sum(c.Attempts) != 0 {
					t.Fatalf("FinishStarted did something: started %v, events %d/%d, counters %+v",
						m.Started(), len(r.log.attemptList()), len(r.log.questionList()), c)
				}
				resp := r.e.ResolveWireMiss(cc, m, nil)
				if cc.Err() == nil && resp.Result != engine.ResultAnswer {
					t.Fatalf("ResolveWireMiss then got %v (%v), want the next server's answer", resp.Result, resp.Reason)
				}
				if cc.Err() != nil && resp.Result != engine.ResultCancelled {
					t.Fatalf("a gone client's question got %v, want cancelled", resp.Result)
				}
			})
		})
	}
}

func sum(m map[string]uint64) (n uint64) {
	for _, v := range m {
		n += v
	}
	return n
}
