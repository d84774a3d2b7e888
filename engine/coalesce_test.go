package engine_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/enginetest"
	"github.com/dohfwd/dohfwd/engine/memnet"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
	"github.com/miekg/dns"
)

func TestCoalesceHundredQuestionsOneUpstreamQuery(t *testing.T) {
	t.Parallel()
	// The reply waits long enough for every question to arrive while the
	// first is upstream.
	srv := upstreamtest.Start(t, upstreamtest.Delay(300*time.Millisecond, upstreamtest.Answer("@ 60 IN A 192.0.2.1")))
	for _, cache := range []int{0, 1000} { // sharing does not need the cache
		cfg := engine.Config{FallbackServers: []string{srv.String()}, Cache: engine.CacheConfig{MaxEntries: cache}}
		e := startEngine(t, cfg, engine.NativeNetwork{})
		before := len(srv.Queries())
		const n = 100
		var wg sync.WaitGroup
		replies := make([]enginetest.Response, n)
		for i := range n {
			wg.Go(func() {
				q := queryFor("shared.example.", dns.TypeA)
				q.Id = uint16(i)
				replies[i] = enginetest.Resolve(e, context.Background(), q)
			})
		}
		wg.Wait()
		if got := len(srv.Queries()) - before; got != 1 {
			t.Fatalf("cache %d: %d upstream queries for %d identical questions, want 1", cache, got, n)
		}
		for i, r := range replies {
			if r.Result != engine.ResultAnswer || r.Msg.Id != uint16(i) || len(r.Msg.Answer) != 1 {
				t.Fatalf("cache %d: question %d got %v id %d answer %v; want its own copy of the answer", cache, i, r.Result, r.Msg.Id, r.Msg.Answer)
			}
			if i > 0 && r.Msg == replies[0].Msg {
				t.Fatalf("questions 0 and %d share one *dns.Msg", i)
			}
		}
	}
}

func TestCoalesceFollowersNotRefusedByCeiling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New()
		nw.Handle(cacheServer, memnet.Respond(memnet.After(time.Second, memnet.Answer("@ 60 IN A 192.0.2.1"))))
		cfg := cacheConfig(engine.CacheConfig{})
		cfg.InFlightCeiling = 1
		e := startEngine(t, cfg, nw)
		results := make(chan enginetest.Response, 10)
		for range 10 {
			go func() { results <- enginetest.Resolve(e, context.Background(), queryFor("one.example.", dns.TypeA)) }()
		}
		synctest.Wait()
		if e.InFlight() != 1 {
			t.Fatalf("in flight %d, want the leader's one transaction", e.InFlight())
		}
		for range 10 {
			if r := <-results; r.Result != engine.ResultAnswer {
				t.Fatalf("a question got %v (%v), want the shared answer", r.Result, r.Reason)
			}
		}
		if c := e.Counters(); c.Refused != 0 || len(nw.Transactions()) != 1 {
			t.Fatalf("refused %d, %d transactions; want 0 and 1", c.Refused, len(nw.Transactions()))
		}
	})
}

func TestCoalesceLeaderCancelledFollowersAnswered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New()
		nw.Handle(cacheServer, memnet.Respond(memnet.After(time.Second, memnet.Answer("@ 60 IN A 192.0.2.1"))))
		e := startEngine(t, cacheConfig(engine.CacheConfig{}), nw)

		leaderCtx, leave := context.WithCancel(context.Background())
		leader := make(chan enginetest.Response)
		go func() { leader <- enginetest.Resolve(e, leaderCtx, queryFor("left.example.", dns.TypeA)) }()
		synctest.Wait() // the leader is upstream
		followers := make(chan enginetest.Response, 5)
		for range 5 {
			go func() { followers <- enginetest.Resolve(e, context.Background(), queryFor("left.example.", dns.TypeA)) }()
		}
		synctest.Wait()
		time.Sleep(500 * time.Millisecond)
		leave() // the leader's client goes away mid-flight
		if r := <-leader; r.Result != engine.ResultCancelled {
			t.Fatalf("leader got %v, want cancelled", r.Result)
		}
		for range 5 {
			if r := <-followers; r.Result != engine.ResultAnswer || len(r.Msg.Answer) != 1 {
				t.Fatalf("a follower got %v (%v), want the answer: its leader's client leaving is not its own", r.Result, r.Reason)
			}
		}
		// The leader's transaction, then one follower's as the new leader.
		if n := len(nw.Transactions()); n != 2 {
			t.Fatalf("%d transactions, want 2", n)
		}
	})
}

func TestCoalesceFollowerLeavesAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New()
		nw.Handle(cacheServer, memnet.Respond(memnet.After(time.Second, memnet.Answer("@ 60 IN A 192.0.2.1"))))
		e := startEngine(t, cacheConfig(engine.CacheConfig{}), nw)
		leader := make(chan enginetest.Response)
		go func() { leader <- enginetest.Resolve(e, context.Background(), queryFor("stay.example.", dns.TypeA)) }()
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if r := enginetest.Resolve(e, ctx, queryFor("stay.example.", dns.TypeA)); r.Result != engine.ResultCancelled {
			t.Fatalf("follower whose client left got %v, want cancelled", r.Result)
		}
		if r := <-leader; r.Result != engine.ResultAnswer {
			t.Fatalf("leader got %v after a follower left, want the answer", r.Result)
		}
	})
}

func TestCoalesceFollowersShareUnavailable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New() // silent: the leader spends its three attempts
		e := startEngine(t, cacheConfig(engine.CacheConfig{}), nw)
		results := make(chan enginetest.Response, 4)
		for range 4 {
			go func() { results <- enginetest.Resolve(e, context.Background(), queryFor("down.example.", dns.TypeA)) }()
		}
		for range 4 {
			r := <-results
			if r.Result != engine.ResultUnavailable || r.Msg.Rcode != dns.RcodeServerFailure {
				t.Fatalf("got %v rcode %d, want unavailable SERVFAIL", r.Result, r.Msg.Rcode)
			}
		}
		if n := len(nw.Transactions()); n != 3 {
			t.Fatalf("%d transactions, want the leader's 3 only", n)
		}
	})
}
