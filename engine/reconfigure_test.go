package engine_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/enginetest"
	"github.com/dohfwd/dohfwd/engine/memnet"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
	"github.com/miekg/dns"
)

var (
	reloadA = netip4(127, 0, 4, 1)
	reloadB = netip4(127, 0, 4, 2)
)

func reloadConfig(servers ...string) engine.Config {
	return engine.Config{Scopes: []engine.ScopeConfig{{Name: "main", DefaultRoute: true, Servers: servers}},
		Cache: engine.CacheConfig{MaxEntries: 100}}
}

func TestReconfigureInFlightFinishesOnItsConfiguration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New()
		nw.Handle(reloadA, memnet.Respond(memnet.After(time.Second, memnet.Answer("@ 60 IN A 192.0.2.1"))))
		nw.Handle(reloadB, memnet.Respond(memnet.Answer("@ 60 IN A 192.0.2.2")))
		e := startEngine(t, reloadConfig(reloadA.String()), nw)
		old := make(chan enginetest.Response)
		go func() { old <- enginetest.Resolve(e, context.Background(), queryFor("same.example.", dns.TypeA)) }()
		synctest.Wait()
		if err := e.Reconfigure(reloadConfig(reloadB.String())); err != nil {
			t.Fatal(err)
		}
		// The same question asked after the reload does not join the
		// flight of the old configuration.
		if r := enginetest.Resolve(e, context.Background(), queryFor("same.example.", dns.TypeA)); r.Msg.Answer[0].(*dns.A).A.String() != "192.0.2.2" {
			t.Fatalf("a question after the reload got %v, want server B's answer", r.Msg.Answer)
		}
		r := <-old
		if r.Result != engine.ResultAnswer || r.Msg.Answer[0].(*dns.A).A.String() != "192.0.2.1" {
			t.Fatalf("the question in flight got %v %v, want server A's answer", r.Result, r.Msg.Answer)
		}
		txs := nw.Transactions()
		if len(txs) != 2 || txs[0].Server != reloadA || txs[1].Server != reloadB {
			t.Fatalf("transactions %v, want A then B", txs)
		}
	})
}

func TestReconfigureKeepsMarksOfAddressesStillConfigured(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New() // A is silent: demoted
		nw.Handle(reloadB, memnet.Respond(memnet.Answer("@ 60 IN A 192.0.2.2")))
		cfg := reloadConfig(reloadA.String())
		cfg.Attempts = 1
		e := startEngine(t, cfg, nw)
		enginetest.Resolve(e, context.Background(), queryFor("x.example.", dns.TypeA))
		demoted := func() map[string]bool {
			m := map[string]bool{}
			for _, sc := range e.Status().Scopes {
				for _, s := range sc.Servers {
					m[sc.Name+" "+s.Address] = s.Demoted
				}
			}
			return m
		}
		cfg.Scopes = []engine.ScopeConfig{
			{Name: "other", Domains: []string{"other.example"}, Servers: []string{reloadB.String(), reloadA.String()}},
			{Name: "main", DefaultRoute: true, Servers: []string{reloadA.String(), reloadB.String()}},
		}
		if err := e.Reconfigure(cfg); err != nil {
			t.Fatal(err)
		}
		d := demoted()
		if !d["main "+reloadA.String()] || !d["other "+reloadA.String()] || d["main "+reloadB.String()] {
			t.Fatalf("after a reload keeping A: %v; want A demoted in both scopes, B not", d)
		}
		// A leaves the configuration, then comes back: its old mark is gone.
		if err := e.Reconfigure(reloadConfig(reloadB.String())); err != nil {
			t.Fatal(err)
		}
		if err := e.Reconfigure(reloadConfig(reloadA.String())); err != nil {
			t.Fatal(err)
		}
		if d := demoted(); d["main "+reloadA.String()] {
			t.Fatalf("A kept a mark through a configuration without it: %v", d)
		}
	})
}

func TestReconfigureCache(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New()
		nw.Handle(reloadA, memnet.Respond(memnet.Answer("@ 60 IN A 192.0.2.1")))
		nw.Handle(reloadB, memnet.Respond(memnet.Answer("@ 60 IN A 192.0.2.2")))
		cfg := reloadConfig(reloadA.String())
		e := startEngine(t, cfg, nw)
		ask := func() enginetest.Response {
			return enginetest.Resolve(e, context.Background(), queryFor("c.example.", dns.TypeA))
		}
		ask()
		// Only hosts change: the cache stays.
		cfg.Hosts = map[string][]string{"router.lan": {"192.168.1.1"}}
		if err := e.Reconfigure(cfg); err != nil {
			t.Fatal(err)
		}
		if r := ask(); !r.CacheHit {
			t.Fatal("a hosts-only reload emptied the cache")
		}
		// The servers change: answers from the old ones go.
		if err := e.Reconfigure(reloadConfig(reloadB.String())); err != nil {
			t.Fatal(err)
		}
		if r := ask(); r.CacheHit || r.Msg.Answer[0].(*dns.A).A.String() != "192.0.2.2" {
			t.Fatalf("after changing servers: hit %v answer %v; want B asked", r.CacheHit, r.Msg.Answer)
		}
		// The cache turned off.
		off := reloadConfig(reloadB.String())
		off.Cache.MaxEntries = 0
		if err := e.Reconfigure(off); err != nil {
			t.Fatal(err)
		}
		if ask(); ask().CacheHit {
			t.Fatal("a hit with max_entries 0")
		}
	})
}

func TestReconfigureErrorChangesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New()
		nw.Handle(reloadA, memnet.Respond(memnet.Answer("@ 60 IN A 192.0.2.1")))
		e := startEngine(t, reloadConfig(reloadA.String()), nw)
		bad := reloadConfig(reloadB.String())
		bad.Hosts = map[string][]string{"x.lan": {"not-an-ip"}}
		if err := e.Reconfigure(bad); err == nil {
			t.Fatal("a bad hosts entry was accepted")
		}
		enginetest.Resolve(e, context.Background(), queryFor("still.example.", dns.TypeA))
		if txs := nw.Transactions(); len(txs) != 1 || txs[0].Server != reloadA {
			t.Fatalf("after a failed reload asked %v, want the old server A", txs)
		}
	})
}

// Many concurrent questions over real loopback while the configuration
// flips between two upstreams, hosts and cache settings: every question
// gets its answer.
func TestReconfigureUnderLoadLosesNothing(t *testing.T) {
	t.Parallel()
	srvA := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.1"))
	srvB := upstreamtest.Start(t, upstreamtest.Delay(2*time.Millisecond, upstreamtest.Answer("@ 60 IN A 192.0.2.2")))
	configs := []engine.Config{
		{Scopes: []engine.ScopeConfig{{Name: "main", DefaultRoute: true, Servers: []string{srvA.String()}}}},
		{Scopes: []engine.ScopeConfig{{Name: "main", DefaultRoute: true, Servers: []string{srvB.String(), srvA.String()}}},
			Hosts: map[string][]string{"router.lan": {"192.168.1.1"}}, Cache: engine.CacheConfig{MaxEntries: 50}},
		{FallbackServers: []string{srvB.String()}, Cache: engine.CacheConfig{MaxEntries: 1000}},
	}
	e := startEngine(t, configs[0], engine.NativeNetwork{})

	stop := make(chan struct{})
	var reloads atomic.Int64
	var reloader sync.WaitGroup
	reloader.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := e.Reconfigure(configs[i%len(configs)]); err != nil {
				t.Error(err)
				return
			}
			reloads.Add(1)
			time.Sleep(200 * time.Microsecond)
		}
	})

	const workers, each = 16, 150
	var lost atomic.Int64
	var failures sync.Map
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				// Some names repeat, so cache hits and shared flights
				// happen across reloads too.
				name := fmt.Sprintf("n%d.load.example.", (w*each+i)%700)
				r := enginetest.Resolve(e, context.Background(), queryFor(name, dns.TypeA))
				if (r.Result != engine.ResultAnswer && r.Result != engine.ResultLocal) || len(r.Msg.Answer) != 1 {
					lost.Add(1)
					failures.Store(fmt.Sprintf("%v/%v", r.Result, r.Reason), true)
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	reloader.Wait()
	if n := lost.Load(); n > 0 {
		var kinds []string
		failures.Range(func(k, _ any) bool { kinds = append(kinds, k.(string)); return true })
		t.Fatalf("%d of %d questions lost during %d reloads: %v", n, workers*each, reloads.Load(), kinds)
	}
	if reloads.Load() < 20 {
		t.Fatalf("only %d reloads happened during the load; the test proves little", reloads.Load())
	}
	t.Logf("%d questions, %d reloads, none lost", workers*each, reloads.Load())
}
