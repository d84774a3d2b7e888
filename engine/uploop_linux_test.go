//go:build linux

package engine_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
	"github.com/miekg/dns"
)

// The upstream loop (uploop_linux.go): a started miss's first transaction
// runs on the loop's epoll set; an answer finishes the question on the
// loop, anything else goes on elsewhere under the ordinary rules.

// loopCont is a front end's continuation: it finishes the question where
// the loop says and keeps the response.
type loopCont struct {
	e               *engine.Engine
	m               *engine.Miss
	ctx             context.Context
	here, elsewhere atomic.Int32
	done            chan engine.Response
}

func (c *loopCont) ResolveHere() engine.Flusher {
	c.here.Add(1)
	c.done <- c.e.ResolveMiss(c.ctx, c.m, nil)
	return nil
}

func (c *loopCont) ResolveElsewhere() {
	c.elsewhere.Add(1)
	go func() { c.done <- c.e.ResolveMiss(c.ctx, c.m, nil) }()
}

// wait returns the question's response.
func (c *loopCont) wait(t *testing.T) engine.Response {
	t.Helper()
	select {
	case r := <-c.done:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("the loop never ended the question")
		return engine.Response{}
	}
}

// startOnLoop reads q and begins it with StartMiss, which must give it to
// the loop.
func startOnLoop(t *testing.T, e *engine.Engine, ctx context.Context, q *dns.Msg) *loopCont {
	t.Helper()
	c := &loopCont{e: e, m: new(engine.Miss), ctx: ctx, done: make(chan engine.Response, 1)}
	if _, ok := e.AnswerNow(mustPack(t, q), nil, nil, c.m); ok || !c.m.Ready() {
		t.Fatalf("%s: not a miss", q.Question[0].Name)
	}
	if !e.StartMiss(ctx, c.m, c) {
		t.Fatalf("%s: the loop did not take a plain leading miss", q.Question[0].Name)
	}
	return c
}

func answerA(t *testing.T, r engine.Response) string {
	t.Helper()
	m := unpackReply(t, r)
	if r.Result != engine.ResultAnswer || len(m.Answer) != 1 {
		t.Fatalf("got %v %v, want one answer", r.Result, m.Answer)
	}
	return m.Answer[0].(*dns.A).A.String()
}

// An answer finishes the question on the loop, with the client's ID, and
// its socket goes back to the pool.
func TestUpLoopAnswerFinishedOnLoop(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.1"))
	e := nativeEngine(t, 2*time.Second, up.String())
	for i := range 3 {
		q := queryFor("loop.example.test.", dns.TypeA)
		q.Id = uint16(100 + i)
		c := startOnLoop(t, e, context.Background(), q)
		r := c.wait(t)
		if a := answerA(t, r); a != "192.0.2.1" || unpackReply(t, r).Id != q.Id {
			t.Fatalf("answer %s id %d, want 192.0.2.1 id %d", a, unpackReply(t, r).Id, q.Id)
		}
		if c.here.Load() != 1 || c.elsewhere.Load() != 0 {
			t.Fatalf("finished here %d, elsewhere %d; want on the loop", c.here.Load(), c.elsewhere.Load())
		}
	}
	if n := e.IdleSockets(); n != 3 {
		// Under the reuse floor (256 idle) each takes a fresh one.
		t.Fatalf("%d idle sockets, want the three of three clean transactions kept", n)
	}
}

// Spoofed and mismatched replies (another ID, garbage) are counted and
// ignored; the real reply is taken; the socket that saw them is closed,
// never reused.
func TestUpLoopMismatchedRepliesIgnoredSocketClosed(t *testing.T) {
	up := upstreamtest.Start(t, func(q upstreamtest.Query) upstreamtest.Action {
		if q.Msg == nil {
			return upstreamtest.Action{}
		}
		spoof := upstreamtest.ReplyTo(q.Msg, dns.RcodeSuccess, "@ 60 IN A 203.0.113.6")
		spoof.Id ^= 0x5555
		return upstreamtest.Action{Replies: []upstreamtest.Reply{
			{Msg: spoof},
			{Raw: []byte{1, 2, 3}, Delay: 5 * time.Millisecond},
			{Msg: upstreamtest.ReplyTo(q.Msg, dns.RcodeSuccess, "@ 60 IN A 192.0.2.1"), Delay: 20 * time.Millisecond},
		}}
	})
	e := nativeEngine(t, 2*time.Second, up.String())
	c := startOnLoop(t, e, context.Background(), queryFor("spoof.example.test.", dns.TypeA))
	if a := answerA(t, c.wait(t)); a != "192.0.2.1" {
		t.Fatalf("took %s, want the real reply 192.0.2.1", a)
	}
	if n := e.Counters().MismatchedReplies; n < 2 {
		t.Fatalf("mismatched_replies %d, want 2", n)
	}
	holdPort(t, up.Queries()[0].From)
	if n := e.IdleSockets(); n != 0 {
		t.Fatalf("%d idle sockets, want the one that saw strays closed", n)
	}
}

// A silent server: the loop ends the transaction at its deadline (a
// timeout, not earlier), closes the socket, and the question goes on
// elsewhere to its next attempt.
func TestUpLoopTimeoutClosesSocketAndHandsOn(t *testing.T) {
	silent := upstreamtest.Start(t, upstreamtest.Drop())
	up := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.2"))
	const timeout = 300 * time.Millisecond
	e := nativeEngine(t, timeout, silent.String(), up.String())
	begun := time.Now()
	c := startOnLoop(t, e, context.Background(), queryFor("silent.example.test.", dns.TypeA))
	r := c.wait(t)
	if a := answerA(t, r); a != "192.0.2.2" {
		t.Fatalf("answer %s, want the second server's", a)
	}
	if took := time.Since(begun); took < timeout {
		t.Fatalf("the first attempt ended after %v, before its deadline %v", took, timeout)
	}
	if c.elsewhere.Load() != 1 || c.here.Load() != 0 {
		t.Fatalf("here %d, elsewhere %d; want the timeout handed on", c.here.Load(), c.elsewhere.Load())
	}
	if n := e.Counters().UpstreamFailed; n != 1 {
		t.Fatalf("upstream_failed %d, want 1 (the timeout)", n)
	}
	holdPort(t, silent.Queries()[0].From)
}

// A failure rcode ends the transaction on the loop; the retry is made
// elsewhere and the socket is not reused.
func TestUpLoopFailureRcodeClosesSocketAndHandsOn(t *testing.T) {
	bad := upstreamtest.Start(t, upstreamtest.Rcode(dns.RcodeServerFailure))
	up := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.2"))
	e := nativeEngine(t, 2*time.Second, bad.String(), up.String())
	c := startOnLoop(t, e, context.Background(), queryFor("servfail.example.test.", dns.TypeA))
	if a := answerA(t, c.wait(t)); a != "192.0.2.2" || c.elsewhere.Load() != 1 {
		t.Fatalf("answer %s, handed on %d; want the second server's, handed on once", a, c.elsewhere.Load())
	}
	holdPort(t, bad.Queries()[0].From)
}

// The client leaves: its socket is closed at once, the question ends
// cancelled elsewhere, not charged to the server.
func TestUpLoopCancelClosesSocket(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.Delay(4*time.Second, upstreamtest.Answer("@ 60 IN A 192.0.2.1")))
	e := nativeEngine(t, 5*time.Second, up.String())
	cc := new(engine.CancelContext)
	c := startOnLoop(t, e, cc, queryFor("gone.example.test.", dns.TypeA))
	waitFor(t, "the query upstream", func() bool { return len(up.Queries()) > 0 })
	cancelled := time.Now()
	cc.Cancel()
	if r := c.wait(t); r.Result != engine.ResultCancelled {
		t.Fatalf("got %v, want cancelled", r.Result)
	}
	// At once, not at the deadline (5 s) nor at the reply (4 s).
	if took := time.Since(cancelled); took > 2*time.Second {
		t.Fatalf("the question ended %v after its client left, want at once", took)
	}
	holdPort(t, up.Queries()[0].From)
	if n := e.Counters().UpstreamFailed; n != 0 {
		t.Fatalf("upstream_failed %d, want 0", n)
	}
}

// A reload removes the server while its socket is busy in the loop: the
// question gets its answer, and the socket is closed, not kept.
func TestUpLoopReloadRemovesBusyServer(t *testing.T) {
	old := upstreamtest.Start(t, upstreamtest.Delay(100*time.Millisecond, upstreamtest.Answer("@ 60 IN A 192.0.2.1")))
	next := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.2"))
	e := nativeEngine(t, 2*time.Second, old.String())
	c := startOnLoop(t, e, context.Background(), queryFor("reload.example.test.", dns.TypeA))
	if err := e.Reconfigure(engine.Config{Scopes: []engine.ScopeConfig{{Name: "main", DefaultRoute: true, Servers: []string{next.String()}}}}); err != nil {
		t.Fatal(err)
	}
	if a := answerA(t, c.wait(t)); a != "192.0.2.1" {
		t.Fatalf("answer %s, want the removed server's", a)
	}
	if n := e.IdleSockets(); n != 0 {
		t.Fatalf("%d idle sockets after the removed server's transaction, want 0", n)
	}
	holdPort(t, old.Queries()[0].From)
}

// Close ends the loop: a transaction on it ends and its question goes on
// elsewhere at once, not at its deadline.
func TestUpLoopCloseEndsLoop(t *testing.T) {
	silent := upstreamtest.Start(t, upstreamtest.Drop())
	e, err := engine.New(engine.Config{
		TransactionTimeout: 10 * time.Second,
		QuestionTimeout:    10 * time.Second,
		Attempts:           1,
		Scopes:             []engine.ScopeConfig{{Name: "main", DefaultRoute: true, Servers: []string{silent.String()}}},
	}, engine.Options{Network: engine.NativeNetwork{}})
	if err != nil {
		t.Fatal(err)
	}
	begun := time.Now()
	c := startOnLoop(t, e, context.Background(), queryFor("closed.example.test.", dns.TypeA))
	waitFor(t, "the query upstream", func() bool { return len(silent.Queries()) > 0 })
	e.Close()
	r := c.wait(t)
	if r.Result == engine.ResultAnswer || time.Since(begun) > 5*time.Second || c.elsewhere.Load() != 1 {
		t.Fatalf("got %v after %v, handed on %d; want it ended at Close and handed on", r.Result, time.Since(begun), c.elsewhere.Load())
	}
	holdPort(t, silent.Queries()[0].From)
}

// The spoofing floor holds for the loop's sockets as for the ordinary
// pool's (TestSocketPoolSpoofingFloor): at least 256 ports in every
// window of 512 questions once the pool filled, no port favoured, random
// IDs, and the pool at rest between 256 and 1024 sockets.
func TestUpLoopSpoofingFloor(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.1"))
	e := nativeEngine(t, 2*time.Second, up.String())
	const n = 3000
	for i := range n {
		c := startOnLoop(t, e, context.Background(), queryFor(fmt.Sprintf("floor%d.example.test.", i), dns.TypeA))
		if r := c.wait(t); r.Result != engine.ResultAnswer {
			t.Fatalf("question %d: %v", i, r.Result)
		}
	}
	checkSpoofingFloor(t, e, up.Queries(), n)
}

// A datagram that comes to an idle socket of the loop's (here a duplicate
// of the reply, after the transaction ended cleanly) makes it unfit: it
// never carries another query, while the rest of the pool is reused.
func TestUpLoopStrayOnIdleSocketNeverReused(t *testing.T) {
	up := upstreamtest.Start(t, func(q upstreamtest.Query) upstreamtest.Action {
		if q.Msg == nil {
			return upstreamtest.Action{}
		}
		r := upstreamtest.ReplyTo(q.Msg, dns.RcodeSuccess, "@ 60 IN A 192.0.2.1")
		a := upstreamtest.Action{Replies: []upstreamtest.Reply{{Msg: r}}}
		if strings.HasPrefix(q.Msg.Question[0].Name, "dup") {
			a.Replies = append(a.Replies, upstreamtest.Reply{Msg: r, Delay: 50 * time.Millisecond})
		}
		return a
	})
	e := nativeEngine(t, 2*time.Second, up.String())
	ask := func(prefix string, n int) {
		for i := range n {
			c := startOnLoop(t, e, context.Background(), queryFor(fmt.Sprintf("%s%d.example.test.", prefix, i), dns.TypeA))
			if r := c.wait(t); r.Result != engine.ResultAnswer {
				t.Fatalf("%s%d: %v", prefix, i, r.Result)
			}
		}
	}
	ask("warm", 400) // the pool now reuses
	before := len(up.Queries())
	ask("dup", 1)
	port := up.Queries()[before].From
	time.Sleep(200 * time.Millisecond) // the duplicate comes to the idle socket
	ask("after", 1000)
	reused := map[netip.AddrPort]bool{}
	for _, q := range up.Queries()[before+1:] {
		if q.From == port {
			t.Fatalf("port %v, which saw a stray while idle, carried %s", port, q.Msg.Question[0].Name)
		}
		reused[q.From] = true
	}
	if len(reused) > 700 {
		t.Fatalf("%d ports for 1000 questions: the pool was not reused, the test proves nothing", len(reused))
	}
}
