package engine_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/memnet"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
	"github.com/miekg/dns"
)

// A miss in two steps (StartMiss, then ResolveMiss): the first
// attempt's query leaves on the goroutine that read the question, and the
// question goes on with that transaction under every rule of an attempt
// begun by ResolveMiss itself.

// startMiss reads q as the HTTP/2 reader does (AnswerNow, which
// must miss) and begins it with StartMiss, which must take it.
func startMiss(t *testing.T, e *engine.Engine, ctx context.Context, q *dns.Msg) *engine.Miss {
	t.Helper()
	raw, err := q.Pack()
	if err != nil {
		t.Fatal(err)
	}
	m := new(engine.Miss)
	if _, ok := e.AnswerNow(raw, nil, nil, m); ok || !m.Ready() {
		t.Fatalf("%s: answered at once (%v) or no miss; want a miss", q.Question[0].Name, ok)
	}
	e.StartMiss(ctx, m, nil)
	if !m.Started() {
		t.Fatalf("%s: StartMiss did not begin a plain leading miss", q.Question[0].Name)
	}
	return m
}

// unpackReply unpacks a response's wire reply or fails the test.
func unpackReply(t *testing.T, r engine.Response) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	if err := m.Unpack(r.Wire); err != nil {
		t.Fatalf("reply does not unpack: %v", err)
	}
	return m
}

// The query leaves at StartMiss, to the first server of the order; the
// question then ends as a question ResolveMiss began alone: the same
// reply, one attempt, one attempt event and one question event.
func TestStartMissSendsFirstQueryThenAnswersAsBefore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigScope(2))
		r.net.Handle(rigServer(1), memnet.Respond(memnet.After(10*time.Millisecond, memnet.Answer("@ 60 IN A 192.0.2.1"))))
		r.net.Handle(rigServer(2), memnet.Respond(memnet.Answer("@ 60 IN A 192.0.2.2")))
		begun := time.Now()
		m := startMiss(t, r.e, context.Background(), queryFor("two.example.", dns.TypeA))
		txs := r.net.Transactions()
		if len(txs) != 1 || txs[0].Server != rigServer(1) || !txs[0].Sent.Equal(begun) || txs[0].Query == nil {
			t.Fatalf("after StartMiss: transactions %+v; want one query sent to %v at once", txs, rigServer(1))
		}
		if n := len(r.log.attemptList()); n != 0 {
			t.Fatalf("%d attempt events before the attempt ended, want 0", n)
		}
		time.Sleep(time.Millisecond) // the worker's pickup
		resp := r.e.ResolveMiss(context.Background(), m, nil)
		if m.Ready() || m.Started() {
			t.Fatal("ResolveMiss left the miss full")
		}
		msg := unpackReply(t, resp)
		if resp.Result != engine.ResultAnswer || resp.Attempts != 1 || msg.Id != 0xbeef || len(msg.Answer) != 1 ||
			msg.Answer[0].(*dns.A).A.String() != "192.0.2.1" {
			t.Fatalf("got %v, %d attempts, id %#x, answer %v; want the first server's answer in one attempt, the client's ID",
				resp.Result, resp.Attempts, msg.Id, msg.Answer)
		}
		if n := len(r.net.Transactions()); n != 1 {
			t.Fatalf("%d transactions, want 1", n)
		}
		evs := r.log.attemptList()
		if len(evs) != 1 || evs[0].Outcome != engine.OutcomeAnswer || evs[0].Attempt != 1 || evs[0].Server != rigServer(1) ||
			evs[0].RTT != 10*time.Millisecond {
			t.Fatalf("attempt events %+v; want one answer from %v, RTT 10ms from the send", evs, rigServer(1))
		}
		qs := r.log.questionList()
		if len(qs) != 1 || qs[0].Attempts != 1 || qs[0].Duration != 10*time.Millisecond || qs[0].Question != resp.Question {
			t.Fatalf("question events %+v; want one, its duration from StartMiss", qs)
		}
		if c := r.e.Counters(); c.Attempts["answer"] != 1 || c.Questions["answer"] != 1 {
			t.Fatalf("counters %+v; want one answered attempt and question", c)
		}
	})
}

// The started attempt's 2 s count from its send, not from when the
// question is picked up: a server that answers too late times out 2 s
// after StartMiss, and the next attempt goes to the next server.
func TestStartedAttemptDeadlineCountsFromSend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigScope(2))
		r.net.Handle(rigServer(1), memnet.Respond(memnet.After(2500*time.Millisecond, memnet.Answer("@ 60 IN A 192.0.2.1"))))
		r.net.Handle(rigServer(2), memnet.Respond(memnet.Answer("@ 60 IN A 192.0.2.2")))
		begun := time.Now()
		m := startMiss(t, r.e, context.Background(), queryFor("late.example.", dns.TypeA))
		time.Sleep(1500 * time.Millisecond) // a slow pickup
		resp := r.e.ResolveMiss(context.Background(), m, nil)
		if took := time.Since(begun); took != 2*time.Second {
			t.Fatalf("question took %v, want 2s: the first attempt's deadline counted from its send", took)
		}
		evs := r.log.attemptList()
		if len(evs) != 2 || evs[0].Outcome != engine.OutcomeTimeout || evs[0].RTT != 2*time.Second ||
			!evs[0].End.Equal(begun.Add(2*time.Second)) || evs[1].Server != rigServer(2) || evs[1].Outcome != engine.OutcomeAnswer {
			t.Fatalf("attempt events %+v; want a timeout at 2s from the send, then %v's answer", evs, rigServer(2))
		}
		if resp.Result != engine.ResultAnswer || resp.Attempts != 2 {
			t.Fatalf("got %v in %d attempts, want an answer in 2", resp.Result, resp.Attempts)
		}
	})
}

// A started attempt that fails moves the question to the next server as
// any attempt does: one event per attempt, the first server demoted and
// counted as failed, the budget of attempts shared. A reply after the
// pickup but inside the deadline is taken.
func TestStartedAttemptDropMovesToNextServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigScope(3))
		r.net.Handle(rigServer(1), memnet.Silent())
		r.net.Handle(rigServer(2), memnet.Silent())
		r.net.Handle(rigServer(3), memnet.Silent())
		m := startMiss(t, r.e, context.Background(), queryFor("drop.example.", dns.TypeA))
		resp := r.e.ResolveMiss(context.Background(), m, nil)
		if got := r.log.outcomes(); !equalStrings(got, []string{"udp/timeout", "udp/timeout", "udp/timeout"}) {
			t.Fatalf("outcomes %v; want three timeouts, one event each", got)
		}
		if got, want := r.servers(), []netip.AddrPort{rigServer(1), rigServer(2), rigServer(3)}; !equalAddrs(got, want) {
			t.Fatalf("servers %v, want %v", got, want)
		}
		if resp.Result != engine.ResultUnavailable || resp.Attempts != 3 || !r.demoted(rigServer(1)) {
			t.Fatalf("got %v in %d attempts, server 1 demoted %v; want unavailable in 3, demoted", resp.Result, resp.Attempts, r.demoted(rigServer(1)))
		}
		if c := r.e.Counters(); c.UpstreamFailed != 3 {
			t.Fatalf("upstream_failed %d, want 3", c.UpstreamFailed)
		}

		// A reply 1.5 s after the send, after a 1 s pickup: taken.
		r = newRig(t, rigScope(2))
		r.net.Handle(rigServer(1), memnet.Respond(memnet.After(1500*time.Millisecond, memnet.Answer("@ 60 IN A 192.0.2.1"))))
		m = startMiss(t, r.e, context.Background(), queryFor("slow.example.", dns.TypeA))
		time.Sleep(time.Second)
		if resp = r.e.ResolveMiss(context.Background(), m, nil); resp.Result != engine.ResultAnswer || resp.Attempts != 1 {
			t.Fatalf("got %v in %d attempts, want the answer of the started attempt", resp.Result, resp.Attempts)
		}
	})
}

// A socket that fails to open or send at StartMiss is that attempt's
// failure, of its class: a local error spends the attempt and demotes
// nothing; a refusal is a send error, charged to the server. Both are
// attempt 1 with their event, then attempt 2 to the next server.
func TestStartedSocketFailureKeepsClassAndAttempt(t *testing.T) {
	cases := []struct {
		op      string
		class   engine.ErrorClass
		outcome engine.Outcome
		demoted bool
	}{
		{"open", engine.ErrLocal, engine.OutcomeLocalError, false},
		{"send", engine.ErrRefused, engine.OutcomeSendError, true},
		{"open", engine.ErrUnreachable, engine.OutcomeSendError, true},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s-%v", c.op, c.class), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newRig(t, rigScope(2))
				r.net.Handle(rigServer(1), memnet.Fail(c.op, c.class))
				r.net.Handle(rigServer(2), memnet.Respond(memnet.Answer("@ 60 IN A 192.0.2.2")))
				m := startMiss(t, r.e, context.Background(), queryFor("fail.example.", dns.TypeA))
				if n := r.net.OpenSockets(); n != 0 {
					t.Fatalf("%d sockets open after a failed start, want 0", n)
				}
				resp := r.e.ResolveMiss(context.Background(), m, nil)
				evs := r.log.attemptList()
				if len(evs) != 2 || evs[0].Attempt != 1 || evs[0].Outcome != c.outcome || evs[0].Server != rigServer(1) ||
					evs[1].Attempt != 2 || evs[1].Outcome != engine.OutcomeAnswer {
					t.Fatalf("attempt events %+v; want attempt 1 %v at %v, attempt 2 answered", evs, c.outcome, rigServer(1))
				}
				if resp.Result != engine.ResultAnswer || resp.Attempts != 2 || r.demoted(rigServer(1)) != c.demoted {
					t.Fatalf("got %v in %d attempts, demoted %v; want an answer in 2, demoted %v", resp.Result, resp.Attempts, r.demoted(rigServer(1)), c.demoted)
				}
				if got := r.e.Counters().UpstreamFailed; got != 1 {
					t.Fatalf("upstream_failed %d, want 1", got)
				}
			})
		})
	}
}

// A client that goes away between StartMiss and the pickup: its socket is
// closed at once, and the question ends cancelled with the attempt not
// charged to the server (no demotion, no upstream_failed).
func TestStartedCancelBeforePickupNotCharged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigScope(2))
		r.net.Handle(rigServer(1), memnet.Respond(memnet.After(time.Second, memnet.Answer("@ 60 IN A 192.0.2.1"))))
		cc := new(engine.CancelContext)
		m := startMiss(t, r.e, cc, queryFor("gone.example.", dns.TypeA))
		cc.Cancel()
		if txs := r.net.Transactions(); len(txs) != 1 || txs[0].Closed.IsZero() {
			t.Fatalf("transactions %+v; want the started one's socket closed by the cancel", txs)
		}
		resp := r.e.ResolveMiss(cc, m, nil)
		if resp.Result != engine.ResultCancelled {
			t.Fatalf("got %v, want cancelled", resp.Result)
		}
		if got := r.log.outcomes(); !equalStrings(got, []string{"udp/cancelled"}) {
			t.Fatalf("outcomes %v, want one cancelled attempt", got)
		}
		c := r.e.Counters()
		if c.UpstreamFailed != 0 || c.Cancelled != 1 || r.demoted(rigServer(1)) {
			t.Fatalf("upstream_failed %d, cancelled %d, demoted %v; want 0, 1, false", c.UpstreamFailed, c.Cancelled, r.demoted(rigServer(1)))
		}
		if n := len(r.net.Transactions()); n != 1 {
			t.Fatalf("%d transactions, want 1: nothing more is sent for a client gone", n)
		}
	})
}

// The same on real sockets with the pool in use: the cancelled started
// transaction's socket is closed (its port free to bind) and never
// carries another query.
func TestStartedCancelClosesPooledSocket(t *testing.T) {
	up := upstreamtest.Start(t, func(q upstreamtest.Query) upstreamtest.Action {
		if q.Msg == nil {
			return upstreamtest.Action{}
		}
		a := upstreamtest.Action{Replies: []upstreamtest.Reply{{Msg: upstreamtest.ReplyTo(q.Msg, dns.RcodeSuccess, "@ 60 IN A 192.0.2.1")}}}
		if strings.HasPrefix(q.Msg.Question[0].Name, "gone") {
			a.Replies[0].Delay = 200 * time.Millisecond
		}
		return a
	})
	e := nativeEngine(t, 2*time.Second, up.String())
	askN(t, e, "warm", 400) // the pool now reuses
	cc := new(engine.CancelContext)
	before := len(up.Queries())
	m := startMiss(t, e, cc, queryFor("gone.example.test.", dns.TypeA))
	waitFor(t, "the started query upstream", func() bool { return len(up.Queries()) > before })
	port := up.Queries()[before].From
	cc.Cancel()
	if resp := e.ResolveMiss(cc, m, nil); resp.Result != engine.ResultCancelled {
		t.Fatalf("got %v, want cancelled", resp.Result)
	}
	holdPort(t, port)
	if c := e.Counters(); c.UpstreamFailed != 0 {
		t.Fatalf("upstream_failed %d, want 0", c.UpstreamFailed)
	}
	askN(t, e, "after", 600)
	for _, q := range up.Queries()[before+1:] {
		if q.From == port {
			t.Fatalf("port %v of the cancelled transaction carried %s", port, q.Msg.Question[0].Name)
		}
	}
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// A reload between StartMiss and the pickup: the question ends on the
// configuration it started with (the removed server's answer), and the
// removed server's socket is not kept; the next question asks the new
// server.
func TestStartedReloadBeforePickup(t *testing.T) {
	old := upstreamtest.Start(t, upstreamtest.Delay(50*time.Millisecond, upstreamtest.Answer("@ 60 IN A 192.0.2.1")))
	next := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.2"))
	e := nativeEngine(t, 2*time.Second, old.String())
	cc := new(engine.CancelContext)
	m := startMiss(t, e, cc, queryFor("reload.example.test.", dns.TypeA))
	if err := e.Reconfigure(engine.Config{Scopes: []engine.ScopeConfig{{Name: "main", DefaultRoute: true, Servers: []string{next.String()}}}}); err != nil {
		t.Fatal(err)
	}
	resp := e.ResolveMiss(cc, m, nil)
	msg := unpackReply(t, resp)
	if resp.Result != engine.ResultAnswer || len(msg.Answer) != 1 || msg.Answer[0].(*dns.A).A.String() != "192.0.2.1" {
		t.Fatalf("got %v %v; want the answer of the server it started with", resp.Result, msg.Answer)
	}
	if n := e.IdleSockets(); n != 0 {
		t.Fatalf("%d idle sockets after the removed server's transaction, want 0", n)
	}
	resp = e.Resolve(context.Background(), mustPack(t, queryFor("after.example.test.", dns.TypeA)), nil)
	msg = unpackReply(t, resp)
	if resp.Result != engine.ResultAnswer || msg.Answer[0].(*dns.A).A.String() != "192.0.2.2" {
		t.Fatalf("next question got %v %v, want the new server's answer", resp.Result, msg.Answer)
	}
}

func mustPack(t *testing.T, q *dns.Msg) []byte {
	t.Helper()
	raw, err := q.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// A flight StartMiss began is joined by identical questions meanwhile, a
// goroutine follower (Resolve) and one without (JoinFlight): each gets
// the reply, with one transaction for all. A follower is not begun.
func TestStartedFlightJoinedByIdenticalQuestion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New()
		nw.Handle(cacheServer, memnet.Respond(memnet.After(time.Second, memnet.Answer("@ 60 IN A 192.0.2.1"))))
		for _, cache := range []int{-1, 1000} {
			e := startEngine(t, cacheConfig(engine.CacheConfig{MaxEntries: cache}), nw)
			nw.Reset()
			m := startMiss(t, e, context.Background(), queryFor("shared.example.", dns.TypeA))
			follower := make(chan engine.Response, 1)
			go func() {
				follower <- e.Resolve(context.Background(), mustPack(t, queryFor("SHARED.example.", dns.TypeA)), nil)
			}()
			synctest.Wait()
			j, _ := tryJoin(t, e, new(engine.CancelContext), queryFor("shared.example.", dns.TypeA))
			if j == nil {
				t.Fatalf("cache %d: JoinFlight did not join the started flight", cache)
			}
			other := new(engine.Miss)
			if _, ok := e.AnswerNow(mustPack(t, queryFor("shared.example.", dns.TypeA)), nil, nil, other); ok {
				t.Fatalf("cache %d: answered at once", cache)
			}
			e.StartMiss(context.Background(), other, nil)
			if other.Started() {
				t.Fatalf("cache %d: StartMiss began a question whose flight is in progress", cache)
			}
			go e.ResolveMiss(context.Background(), other, nil)
			resp := e.ResolveMiss(context.Background(), m, nil)
			if resp.Result != engine.ResultAnswer || resp.Attempts != 1 || resp.Shared {
				t.Fatalf("cache %d: leader got %v in %d attempts, shared %v", cache, resp.Result, resp.Attempts, resp.Shared)
			}
			for _, f := range []engine.Response{<-follower, j.wait()} {
				if f.Result != engine.ResultAnswer || !f.Shared || f.Attempts != 0 {
					t.Fatalf("cache %d: follower got %v shared %v attempts %d; want the leader's answer", cache, f.Result, f.Shared, f.Attempts)
				}
			}
			synctest.Wait()
			if n := len(nw.Transactions()); n != 1 {
				t.Fatalf("cache %d: %d transactions, want 1 for all", cache, n)
			}
		}
	})
}

// The started attempt holds its in-flight ceiling slot from its send to
// its end: at a ceiling of 1 another question is refused meanwhile, and
// asks once the started one ended.
func TestStartedAttemptHoldsCeilingSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := rigScope(1)
		cfg.InFlightCeiling = 1
		r := newRig(t, cfg)
		r.net.Handle(rigServer(1), memnet.Respond(memnet.After(100*time.Millisecond, memnet.Answer("@ 60 IN A 192.0.2.1"))))
		m := startMiss(t, r.e, context.Background(), queryFor("first.example.", dns.TypeA))
		if resp := r.ask("second.example."); resp.Result != engine.ResultUnavailable || resp.Reason != engine.ReasonInFlightCeiling {
			t.Fatalf("a second question during the started one got %v (%v), want refused by the ceiling", resp.Result, resp.Reason)
		}
		if resp := r.e.ResolveMiss(context.Background(), m, nil); resp.Result != engine.ResultAnswer {
			t.Fatalf("the started question got %v", resp.Result)
		}
		if resp := r.ask("third.example."); resp.Result != engine.ResultAnswer {
			t.Fatalf("a question after the started one ended got %v (%v), want an answer", resp.Result, resp.Reason)
		}
	})
}

// StartMiss leaves alone what is not a plain leading question: a search
// candidate's name and one with forwarded ECS go ResolveMiss's way
// whole (nothing begun, no query sent).
func TestStartMissLeavesOthersToResolveMiss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := rigScope(1)
		cfg.Scopes[0].Search = []string{"corp.example."}
		r := newRig(t, cfg)
		r.net.Handle(rigServer(1), memnet.Respond(memnet.Answer("@ 60 IN A 192.0.2.1")))
		m := new(engine.Miss)
		if _, ok := r.e.AnswerNow(mustPack(t, queryFor("host.", dns.TypeA)), nil, nil, m); ok || !m.Ready() {
			t.Fatal("want a miss")
		}
		r.e.StartMiss(context.Background(), m, nil)
		if m.Started() || len(r.net.Transactions()) != 0 {
			t.Fatalf("StartMiss began a search candidate's question (started %v, %d transactions)", m.Started(), len(r.net.Transactions()))
		}
		if resp := r.e.ResolveMiss(context.Background(), m, nil); resp.Result != engine.ResultAnswer {
			t.Fatalf("got %v", resp.Result)
		}
	})
}

// A Miss another resolver holds (Miss.Hold: the edge host, whose engine
// runs in a module) is Ready for the front end, which hands it to that
// resolver; an Engine given it takes it as a miss that holds no query:
// StartMiss begins nothing and ResolveMiss answers with no reply,
// neither reading what is held. A front end's zeroed Miss drops it.
func TestMissHeldByAnotherResolver(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.1"))
	e := startEngine(t, engine.Config{FallbackServers: []string{up.String()}}, engine.NativeNetwork{})
	t.Cleanup(func() { e.Close() })
	held := new(int)
	var m engine.Miss
	if m.Ready() || m.Held() != nil {
		t.Fatal("the zero Miss is Ready or holds something")
	}
	m.Hold(held)
	if !m.Ready() || m.Held() != held {
		t.Fatalf("held: Ready %v, Held %v; want Ready and what was held", m.Ready(), m.Held())
	}
	if e.StartMiss(context.Background(), &m, nil) || m.Started() {
		t.Fatal("the engine began a miss another resolver holds")
	}
	if r := e.ResolveMiss(context.Background(), &m, nil); r.Rcode != -1 || len(r.Wire) != 0 {
		t.Fatalf("the engine answered a miss another resolver holds: rcode %d, %d bytes", r.Rcode, len(r.Wire))
	}
	if n := len(up.Queries()); n != 0 {
		t.Fatalf("upstream asked %d times", n)
	}
	m = engine.Miss{}
	if m.Ready() || m.Held() != nil {
		t.Fatal("a zeroed Miss still holds")
	}
}
