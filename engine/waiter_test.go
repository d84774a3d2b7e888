package engine_test

import (
	"context"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/memnet"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
	"github.com/miekg/dns"
)

// joined is a question a test attached to a flight with JoinFlight: its
// deliveries, counted, and the last one unpacked.
type joined struct {
	t          *testing.T
	deliveries atomic.Int32
	got        chan engine.Response
	msg        *dns.Msg
}

// joinFlight reads q as a front end does (AnswerNow, which must
// miss) and attaches it to the flight asking it. It returns nil when
// JoinFlight refused, having checked the miss was left for ResolveMiss,
// and asks it so on a goroutine, as the caller of JoinFlight must.
func joinFlight(t *testing.T, e *engine.Engine, ctx context.Context, q *dns.Msg) *joined {
	t.Helper()
	j, m := tryJoin(t, e, ctx, q)
	if j == nil {
		go e.ResolveMiss(ctx, m, nil)
	}
	return j
}

// tryJoin is joinFlight that leaves a refused miss to the caller.
func tryJoin(t *testing.T, e *engine.Engine, ctx context.Context, q *dns.Msg) (*joined, *engine.Miss) {
	t.Helper()
	raw, err := q.Pack()
	if err != nil {
		t.Fatal(err)
	}
	m := new(engine.Miss)
	if _, ok := e.AnswerNow(raw, nil, nil, m); ok || !m.Ready() {
		t.Fatalf("%s: answered at once (%v) or no miss; want a miss", q.Question[0].Name, ok)
	}
	j := &joined{t: t, got: make(chan engine.Response, 2)}
	if !e.JoinFlight(ctx, m, nil, j.deliver) {
		if !m.Ready() {
			t.Fatalf("%s: JoinFlight refused but emptied the miss", q.Question[0].Name)
		}
		return nil, m
	}
	if m.Ready() {
		t.Fatalf("%s: JoinFlight took the question but left the miss", q.Question[0].Name)
	}
	return j, nil
}

func (j *joined) deliver(r *engine.Response) {
	j.deliveries.Add(1)
	c := *r
	c.Wire = append([]byte(nil), r.Wire...)
	j.got <- c
}

// wait returns the delivered response, unpacked into j.msg.
func (j *joined) wait() engine.Response {
	r := <-j.got
	j.msg = new(dns.Msg)
	if err := j.msg.Unpack(r.Wire); err != nil {
		j.t.Fatalf("a joined question's reply does not unpack: %v", err)
	}
	return r
}

// slowLeader starts a question for name that the server answers after a
// second, and waits until it is upstream.
func slowLeader(t *testing.T, nw *memnet.Network, e *engine.Engine, ctx context.Context, name string) chan engine.Response {
	nw.Handle(cacheServer, memnet.Respond(memnet.After(time.Second, memnet.Answer("@ 60 IN A 192.0.2.1"))))
	leader := make(chan engine.Response, 1)
	go func() {
		raw, _ := queryFor(name, dns.TypeA).Pack()
		leader <- e.Resolve(ctx, raw, nil)
	}()
	synctest.Wait()
	return leader
}

// Joined followers get their own reply from the leader's answer: their
// own ID, question case, OPT (or none) and padding; one transaction for
// all.
func TestJoinedFollowersOwnReplies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New()
		for _, cache := range []int{-1, 1000} { // -1: the cache off
			e := startEngine(t, cacheConfig(engine.CacheConfig{MaxEntries: cache}), nw)
			before := len(nw.Transactions())
			leader := slowLeader(t, nw, e, context.Background(), "own.example.")
			names := []string{"own.example.", "OWN.example.", "oWn.ExAmPlE."}
			var js []*joined
			for i := range 100 {
				q := queryFor(names[i%3], dns.TypeA)
				q.Id = uint16(i)
				switch i % 4 {
				case 1:
					q.Extra = nil // no OPT
				case 2:
					q.IsEdns0().Option = append(q.IsEdns0().Option, &dns.EDNS0_PADDING{Padding: make([]byte, 8)})
				}
				j := joinFlight(t, e, new(engine.CancelContext), q)
				if j == nil {
					t.Fatalf("cache %d: question %d was not joined to the flight in progress", cache, i)
				}
				js = append(js, j)
			}
			if r := <-leader; r.Result != engine.ResultAnswer {
				t.Fatalf("cache %d: leader got %v", cache, r.Result)
			}
			for i, j := range js {
				r := j.wait()
				m := j.msg
				if r.Result != engine.ResultAnswer || !r.Shared || r.Attempts != 0 || m.Id != uint16(i) || len(m.Answer) != 1 {
					t.Fatalf("cache %d: question %d got %v shared %v attempts %d id %d answer %v; want its own copy of the shared answer",
						cache, i, r.Result, r.Shared, r.Attempts, m.Id, m.Answer)
				}
				if q := m.Question[0].Name; q != names[i%3] {
					t.Fatalf("cache %d: question %d asked as %q got its question back as %q", cache, i, names[i%3], q)
				}
				opt := m.IsEdns0()
				if (opt == nil) != (i%4 == 1) {
					t.Fatalf("cache %d: question %d OPT %v; want one exactly when it sent one", cache, i, opt)
				}
				if i%4 == 2 && m.Len()%engine.PaddingBlock != 0 {
					t.Fatalf("cache %d: padded question %d got %d bytes, not padded to %d", cache, i, m.Len(), engine.PaddingBlock)
				}
			}
			if n := len(nw.Transactions()) - before; n != 1 {
				t.Fatalf("cache %d: %d transactions, want the leader's one", cache, n)
			}
			for i, j := range js {
				if n := j.deliveries.Load(); n != 1 {
					t.Fatalf("cache %d: question %d delivered %d times", cache, i, n)
				}
			}
		}
	})
}

// A joined follower whose client cancels is delivered cancelled at once,
// with nothing charged: no attempt, no server failure; the leader and the
// other followers are answered; the cancelled one is delivered only once.
func TestJoinedFollowerCancelNotCharged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New()
		e := startEngine(t, cacheConfig(engine.CacheConfig{}), nw)
		leader := slowLeader(t, nw, e, context.Background(), "leave.example.")
		// One cancelled under the front ends' CancelContext, one under
		// a QuestionContext naming the client around it (the edge
		// module's when the host names the client).
		ctx, qctx := new(engine.CancelContext), new(engine.CancelContext)
		var qc engine.QuestionContext
		left := joinFlight(t, e, ctx, queryFor("leave.example.", dns.TypeA))
		leftToo := joinFlight(t, e, qc.Set(qctx, netip.MustParseAddr("192.0.2.9"), nil), queryFor("leave.example.", dns.TypeA))
		stays := joinFlight(t, e, new(engine.CancelContext), queryFor("leave.example.", dns.TypeA))
		if left == nil || leftToo == nil || stays == nil {
			t.Fatal("a follower was not joined")
		}
		time.Sleep(100 * time.Millisecond)
		ctx.Cancel()
		qctx.Cancel()
		for _, j := range []*joined{left, leftToo} {
			r := j.wait()
			if r.Result != engine.ResultCancelled || r.Attempts != 0 {
				t.Fatalf("cancelled follower got %v after %d attempts; want cancelled, none", r.Result, r.Attempts)
			}
			if d := r.Answered.Sub(time.Now()); d != 0 {
				t.Fatalf("cancelled follower answered %v from its cancel; want at once", d)
			}
		}
		if r := <-leader; r.Result != engine.ResultAnswer {
			t.Fatalf("leader got %v after a follower left; want the answer", r.Result)
		}
		if r := stays.wait(); r.Result != engine.ResultAnswer {
			t.Fatalf("the other follower got %v; want the answer", r.Result)
		}
		synctest.Wait()
		if n, m := left.deliveries.Load(), leftToo.deliveries.Load(); n != 1 || m != 1 {
			t.Fatalf("the cancelled followers were delivered %d and %d times; want once each", n, m)
		}
		c := e.Counters()
		if c.Questions[engine.ResultCancelled.String()] != 2 || c.UpstreamFailed != 0 || c.Attempts[engine.OutcomeCancelled.String()] != 0 {
			t.Fatalf("questions %v, upstream failed %d, attempts %v: want two cancelled questions and nothing charged", c.Questions, c.UpstreamFailed, c.Attempts)
		}
		if n := len(nw.Transactions()); n != 1 {
			t.Fatalf("%d transactions, want the leader's one", n)
		}
	})
}

// deadlineContext is a client's context that the engine can watch
// (a CancelWatcher) and that has a deadline of its own.
type deadlineContext struct {
	*engine.CancelContext
	deadline time.Time
}

func (c deadlineContext) Deadline() (time.Time, bool) { return c.deadline, true }

// A joined follower's budget runs out before the flight lands: its timer
// delivers it (cancelled: its client's deadline), and the landing does
// not deliver it again. With a question timeout it is unavailable, its
// reason the question timeout.
func TestJoinedFollowerBudgetDeliversOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New()
		e := startEngine(t, cacheConfig(engine.CacheConfig{}), nw)
		leader := slowLeader(t, nw, e, context.Background(), "late.example.")
		ctx := deadlineContext{new(engine.CancelContext), time.Now().Add(300 * time.Millisecond)}
		j := joinFlight(t, e, ctx, queryFor("late.example.", dns.TypeA))
		if j == nil {
			t.Fatal("a follower with a deadline its context watches was not joined")
		}
		start := time.Now()
		r := j.wait()
		if r.Result != engine.ResultCancelled || time.Since(start) != 300*time.Millisecond {
			t.Fatalf("follower got %v after %v; want cancelled at its deadline (300ms)", r.Result, time.Since(start))
		}
		if r := <-leader; r.Result != engine.ResultAnswer {
			t.Fatalf("leader got %v", r.Result)
		}
		synctest.Wait()
		if n := j.deliveries.Load(); n != 1 {
			t.Fatalf("delivered %d times; want once", n)
		}
	})
}

// When the leader abandons the flight (its client left), the first
// joined follower leads a new one and the others wait for it: all are
// answered, with one transaction more.
func TestJoinedFollowersLeaderAbandons(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New()
		e := startEngine(t, cacheConfig(engine.CacheConfig{}), nw)
		leaderCtx, leave := context.WithCancel(context.Background())
		leader := slowLeader(t, nw, e, leaderCtx, "left.example.")
		var js []*joined
		for i := range 5 {
			q := queryFor("left.example.", dns.TypeA)
			q.Id = uint16(i)
			j := joinFlight(t, e, new(engine.CancelContext), q)
			if j == nil {
				t.Fatal("a follower was not joined")
			}
			js = append(js, j)
		}
		time.Sleep(500 * time.Millisecond)
		leave()
		if r := <-leader; r.Result != engine.ResultCancelled {
			t.Fatalf("leader got %v, want cancelled", r.Result)
		}
		for i, j := range js {
			r := j.wait()
			if r.Result != engine.ResultAnswer || j.msg.Id != uint16(i) || len(j.msg.Answer) != 1 {
				t.Fatalf("follower %d got %v (%v); want the answer: its leader's client leaving is not its own", i, r.Result, r.Reason)
			}
			if i == 0 && (r.Shared || r.Attempts != 1) {
				t.Fatalf("the first follower: shared %v, %d attempts; want it to lead with one attempt", r.Shared, r.Attempts)
			}
			if i > 0 && (!r.Shared || r.Attempts != 0) {
				t.Fatalf("follower %d: shared %v, %d attempts; want the new leader's answer shared", i, r.Shared, r.Attempts)
			}
		}
		synctest.Wait()
		for i, j := range js {
			if n := j.deliveries.Load(); n != 1 {
				t.Fatalf("follower %d delivered %d times", i, n)
			}
		}
		if n := len(nw.Transactions()); n != 2 {
			t.Fatalf("%d transactions; want the leader's and the new leader's", n)
		}
	})
}

// When the leader's question times out (its own question timeout), the
// flight is abandoned likewise; a joined follower, which came later, has
// time left and leads.
func TestJoinedFollowersLeaderTimesOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New()
		cfg := cacheConfig(engine.CacheConfig{})
		cfg.QuestionTimeout = 1500 * time.Millisecond
		e := startEngine(t, cfg, nw)
		// The first transaction times out at 1.5 s (the question's
		// budget); the next is answered at once.
		var n atomic.Int32
		answer := memnet.Respond(memnet.Answer("@ 60 IN A 192.0.2.1"))
		nw.Handle(cacheServer, func(c memnet.Conn) memnet.Action {
			if n.Add(1) == 1 {
				return memnet.Action{}
			}
			return answer(c)
		})
		leader := make(chan engine.Response, 1)
		go func() {
			raw, _ := queryFor("slow.example.", dns.TypeA).Pack()
			leader <- e.Resolve(context.Background(), raw, nil)
		}()
		synctest.Wait()
		time.Sleep(time.Second)
		j := joinFlight(t, e, new(engine.CancelContext), queryFor("slow.example.", dns.TypeA))
		if j == nil {
			t.Fatal("the follower was not joined")
		}
		if r := <-leader; r.Result != engine.ResultUnavailable || r.Reason != engine.ReasonQuestionTimeout {
			t.Fatalf("leader got %v (%v); want unavailable, question timeout", r.Result, r.Reason)
		}
		if r := j.wait(); r.Result != engine.ResultAnswer || r.Attempts != 1 {
			t.Fatalf("follower got %v (%v) after %d attempts; want the answer of its own attempt", r.Result, r.Reason, r.Attempts)
		}
	})
}

// Followers of a leader whose attempts are all spent share its
// unavailable answer, their EDE naming the leader's attempts.
func TestJoinedFollowersUnavailableNameLeadersAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigScope(3))
		threeFailures(r)
		leader := make(chan engine.Response, 1)
		go func() {
			raw, _ := newQuery("down.example.", dns.TypeA).SetEdns0(1232, false).Pack()
			leader <- r.e.Resolve(context.Background(), raw, nil)
		}()
		synctest.Wait()
		q := newQuery("down.example.", dns.TypeA)
		q.SetEdns0(1232, false)
		j := joinFlight(t, r.e, new(engine.CancelContext), q)
		if j == nil {
			t.Fatal("the follower was not joined")
		}
		lr := <-leader
		lm := new(dns.Msg)
		if err := lm.Unpack(lr.Wire); err != nil {
			t.Fatal(err)
		}
		res := j.wait()
		want := rigServer(1).String() + "/udp timeout; " + rigServer(2).String() + "/udp SERVFAIL; " + rigServer(3).String() + "/udp refused"
		if res.Result != engine.ResultUnavailable || j.msg.Rcode != dns.RcodeServerFailure || edeText(j.msg) != want || edeText(lm) != want {
			t.Fatalf("follower %v rcode %d EDE %q (leader's %q); want SERVFAIL naming %q", res.Result, j.msg.Rcode, edeText(j.msg), edeText(lm), want)
		}
		if n := len(r.net.Transactions()); n != 3 {
			t.Fatalf("%d transactions; want the leader's 3", n)
		}
	})
}

// JoinFlight takes only plain followers: a question with no flight to
// join, a stale entry, a search candidate, a forwarded ECS option or a
// context the engine cannot watch goes its usual way (false, the miss
// kept).
func TestJoinFlightOnlyPlainFollowers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New()
		cfg := cacheConfig(engine.CacheConfig{StaleMax: time.Hour})
		cfg.ForwardECS = true
		e := startEngine(t, cfg, nw)
		if j := joinFlight(t, e, new(engine.CancelContext), queryFor("none.example.", dns.TypeA)); j != nil {
			t.Fatal("joined with no flight in progress")
		}
		// A stale entry for stale.example., then a flight for it.
		nw.Handle(cacheServer, memnet.Respond(memnet.Answer("@ 1 IN A 192.0.2.1")))
		if r := resolveName(e, "stale.example."); r.Result != engine.ResultAnswer {
			t.Fatalf("got %v", r.Result)
		}
		time.Sleep(2 * time.Second)
		leader := slowLeader(t, nw, e, context.Background(), "stale.example.")
		if j := joinFlight(t, e, new(engine.CancelContext), queryFor("stale.example.", dns.TypeA)); j != nil {
			t.Fatal("joined with a stale entry")
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		flying := slowLeader(t, nw, e, context.Background(), "fly.example.")
		if j := joinFlight(t, e, ctx, queryFor("fly.example.", dns.TypeA)); j != nil {
			t.Fatal("joined under a context the engine cannot watch")
		}
		q := queryFor("fly.example.", dns.TypeA)
		q.IsEdns0().Option = append(q.IsEdns0().Option, &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: 24, Address: []byte{192, 0, 2, 0}})
		if j := joinFlight(t, e, new(engine.CancelContext), q); j != nil {
			t.Fatal("joined with a forwarded ECS option")
		}
		if j := joinFlight(t, e, context.Background(), queryFor("fly.example.", dns.TypeA)); j == nil {
			t.Fatal("not joined under a context that is never cancelled")
		} else if r := j.wait(); r.Result != engine.ResultAnswer {
			t.Fatalf("got %v", r.Result)
		}
		<-leader
		<-flying

		// A single label under search domains.
		sc := engine.ScopeConfig{Name: "s", DefaultRoute: true, Servers: []string{cacheServer.String()}, Search: []string{"corp.example."}}
		se := startEngine(t, engine.Config{Scopes: []engine.ScopeConfig{sc}, Cache: engine.CacheConfig{MaxEntries: 100}}, nw)
		host := slowLeader(t, nw, se, context.Background(), "host.")
		if j := joinFlight(t, se, new(engine.CancelContext), queryFor("host.", dns.TypeA)); j != nil {
			t.Fatal("joined a search candidate")
		}
		<-host
	})
}

func resolveName(e *engine.Engine, name string) engine.Response {
	raw, _ := queryFor(name, dns.TypeA).Pack()
	return e.Resolve(context.Background(), raw, nil)
}

// A batch of identical misses handed in before any goroutine runs (as
// the edge module's poll hands them): JoinFlight begins the flight for the
// first, which it refuses, and joins the others to it; the first, asked
// with ResolveMiss, leads it.
func TestJoinFlightFirstMissLeadsTheBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New()
		nw.Handle(cacheServer, memnet.Respond(memnet.After(time.Second, memnet.Answer("@ 60 IN A 192.0.2.1"))))
		e := startEngine(t, cacheConfig(engine.CacheConfig{}), nw)
		ctx := new(engine.CancelContext)
		first, m := tryJoin(t, e, ctx, queryFor("batch.example.", dns.TypeA))
		if first != nil {
			t.Fatal("the first miss was joined to a flight; want it to lead")
		}
		var js []*joined
		for range 10 {
			j := joinFlight(t, e, new(engine.CancelContext), queryFor("batch.example.", dns.TypeA))
			if j == nil {
				t.Fatal("a miss after the first was not joined to the flight it began")
			}
			js = append(js, j)
		}
		if r := e.ResolveMiss(ctx, m, nil); r.Result != engine.ResultAnswer || r.Attempts != 1 {
			t.Fatalf("the first got %v after %d attempts; want the answer of its own attempt", r.Result, r.Attempts)
		}
		for i, j := range js {
			if r := j.wait(); r.Result != engine.ResultAnswer || !r.Shared {
				t.Fatalf("follower %d got %v shared %v; want the leader's answer", i, r.Result, r.Shared)
			}
		}
		if n := len(nw.Transactions()); n != 1 {
			t.Fatalf("%d transactions; want 1", n)
		}
	})
}

// Exactly one delivery per joined follower while cancels race the
// landing, on real sockets (run with -race): each is delivered once,
// answered or cancelled.
func TestJoinedFollowersDeliveredOnceRace(t *testing.T) {
	t.Parallel()
	srv := upstreamtest.Start(t, upstreamtest.Delay(20*time.Millisecond, upstreamtest.Answer("@ 60 IN A 192.0.2.1")))
	e := startEngine(t, engine.Config{FallbackServers: []string{srv.String()}}, engine.NativeNetwork{})
	for round := range 30 {
		leader := make(chan engine.Response, 1)
		go func() {
			raw, _ := queryFor("race.example.", dns.TypeA).Pack()
			leader <- e.Resolve(context.Background(), raw, nil)
		}()
		time.Sleep(5 * time.Millisecond)
		var js []*joined
		var ctxs []*engine.CancelContext
		for range 20 {
			ctx := new(engine.CancelContext)
			if j := joinFlight(t, e, ctx, queryFor("race.example.", dns.TypeA)); j != nil {
				js, ctxs = append(js, j), append(ctxs, ctx)
			}
		}
		var wg sync.WaitGroup
		for _, ctx := range ctxs {
			wg.Go(func() {
				time.Sleep(time.Duration(rand.IntN(30)) * time.Millisecond)
				ctx.Cancel()
			})
		}
		<-leader
		for i, j := range js {
			if r := j.wait(); r.Result != engine.ResultAnswer && r.Result != engine.ResultCancelled {
				t.Fatalf("round %d: follower %d got %v", round, i, r.Result)
			}
		}
		wg.Wait()
		time.Sleep(5 * time.Millisecond)
		for i, j := range js {
			if n := j.deliveries.Load(); n != 1 {
				t.Fatalf("round %d: follower %d delivered %d times", round, i, n)
			}
		}
	}
}

// A joined follower's question event names the leader's trace it joined,
// and the leader's lists the traces of the followers it served, as for
// followers on goroutines (TestCoalescedQuestionListsEveryTraceItServed).
func TestJoinedFollowersTracesListed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigScope(1))
		r.net.Handle(rigServer(1), memnet.Respond(memnet.After(100*time.Millisecond, memnet.Answer("@ 60 IN A 192.0.2.2"))))
		r.bg.Go(func() {
			raw, _ := newQuery("same.example.", dns.TypeA).Pack()
			r.e.Resolve(engine.WithTrace(context.Background(), traceN(1)), raw, nil)
		})
		synctest.Wait()
		var js []*joined
		for i := byte(2); i <= 3; i++ {
			j := joinFlight(t, r.e, engine.WithTrace(context.Background(), traceN(i)), newQuery("same.example.", dns.TypeA))
			if j == nil {
				t.Fatalf("follower %d was not joined", i)
			}
			js = append(js, j)
		}
		for _, j := range js {
			j.wait()
		}
		r.bg.Wait()
		wantLeaderServedTwo(t, r.log.questionList())
	})
}
