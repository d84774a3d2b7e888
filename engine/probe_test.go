package engine_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/memnet"
)

// The optional probe (`probe: true`): with probe on, a dead server is probed just
// before its mark ends, the failed probe moves the mark forward, and a
// client question long after the first failure is not sent to it first.
// Without probes the same question pays the dead server's 2 s.
func TestProbeKeepsDeadServerBehindItsPeers(t *testing.T) {
	for _, probe := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			cfg := rigScope(2)
			cfg.Probe = probe
			r := newRig(t, cfg)
			defer r.e.Close()
			r.net.Handle(rigServer(1), memnet.Silent())
			r.net.Handle(rigServer(2), memnet.Respond(memnet.Answer("@ 60 IN A 192.0.2.2")))
			if res := r.ask("a.example."); res.Result != engine.ResultAnswer || res.Attempts != 2 {
				t.Fatalf("first question: %v after %d attempts", res.Result, res.Attempts)
			}
			time.Sleep(43 * time.Second) // 45 s after the first failure's start
			r.log.mu.Lock()
			r.log.attempts = nil
			r.log.mu.Unlock()
			start := time.Now()
			res := r.ask("b.example.")
			took := time.Since(start)
			got := r.log.attemptList()
			if probe {
				if res.Attempts != 1 || got[0].Server != rigServer(2) || took != 0 {
					t.Fatalf("probe on: %d attempts, first to %v, took %v; want 1 to server 2 at once", res.Attempts, got[0].Server, took)
				}
				c := r.e.Counters()
				if c.Probes["timeout"] == 0 || c.UpstreamFailed != 1 {
					t.Fatalf("probes %v, upstream_failed %d: want failed probes counted apart from questions", c.Probes, c.UpstreamFailed)
				}
				if !r.demoted(rigServer(1)) {
					t.Fatal("the dead server's mark ran out despite failed probes")
				}
			} else if res.Attempts != 2 || got[0].Server != rigServer(1) || took != 2*time.Second {
				t.Fatalf("probe off: %d attempts, first to %v, took %v; want the dead server first and its 2 s paid", res.Attempts, got[0].Server, took)
			}
		})
	}
}

// With probe on, a server that recovers is noticed by its probe before its
// mark ends, and asked first again.
func TestProbeClearsRecoveredServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := rigScope(2)
		cfg.Probe = true
		r := newRig(t, cfg)
		defer r.e.Close()
		start := time.Now()
		r.net.Handle(rigServer(1), func(c memnet.Conn) memnet.Action {
			if time.Since(start) < 10*time.Second {
				return memnet.Action{} // down for the first 10 s
			}
			return memnet.Action{Replies: []memnet.Reply{memnet.Answer("@ 60 IN A 192.0.2.1")}}
		})
		r.net.Handle(rigServer(2), memnet.Respond(memnet.Answer("@ 60 IN A 192.0.2.2")))
		r.ask("a.example.") // demotes server 1 until 32 s
		time.Sleep(29*time.Second + 500*time.Millisecond - time.Since(start))
		if r.demoted(rigServer(1)) {
			t.Fatalf("server 1 still demoted at %v although it answers its probe", time.Since(start))
		}
		if c := r.e.Counters(); c.Probes["answer"] != 1 {
			t.Fatalf("probes %v, want one answered", c.Probes)
		}
		res := r.ask("b.example.")
		if got := r.log.attemptList(); res.Attempts != 1 || got[len(got)-1].Server != rigServer(1) {
			t.Fatalf("recovered server not asked first: %d attempts, last to %v", res.Attempts, got[len(got)-1].Server)
		}
	})
}

// Probes are off by default, and a reload can turn them on and off.
func TestProbeFollowsConfiguration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigScope(1))
		defer r.e.Close()
		r.net.Handle(rigServer(1), memnet.Silent())
		r.ask("a.example.") // three timeouts: demoted until 36 s
		time.Sleep(40 * time.Second)
		if c := r.e.Counters(); c.Probes["timeout"] != 0 {
			t.Fatalf("probes sent with probe off: %v", c.Probes)
		}
		cfg := rigScope(1)
		cfg.Probe = true
		if err := r.e.Reconfigure(cfg); err != nil {
			t.Fatal(err)
		}
		r.ask("b.example.") // demoted again until 76 s
		time.Sleep(40 * time.Second)
		if c := r.e.Counters(); c.Probes["timeout"] == 0 {
			t.Fatalf("no probe after a reload turned probes on: %v", c.Probes)
		}
	})
}
