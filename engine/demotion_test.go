package engine_test

import (
	"encoding/json"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/memnet"
	"github.com/miekg/dns"
)

// Rules of "Demotion".

// engine-servers.demotion-period
func TestDemotionPeriod(t *testing.T) {
	if engine.DefaultDemotionPeriod != 30*time.Second {
		t.Fatalf("default demotion period %v, want 30s", engine.DefaultDemotionPeriod)
	}
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigScope(2))
		r.net.Handle(rigServer(1), memnet.Respond(memnet.Rcode(dns.RcodeServerFailure)))
		r.net.Handle(rigServer(2), memnet.Respond(memnet.Answer("@ 60 IN A 192.0.2.2")))
		r.ask("x.example.")
		time.Sleep(30*time.Second - time.Nanosecond)
		if !r.demoted(rigServer(1)) {
			t.Fatal("mark gone before 30 s")
		}
		// Still behind server 2 while the mark holds.
		r.net.Reset()
		r.ask("y.example.")
		if got := r.servers()[0]; got != rigServer(2) {
			t.Fatalf("at 30 s - 1 ns asked %v first, want 2", got)
		}
		time.Sleep(time.Nanosecond)
		if r.demoted(rigServer(1)) {
			t.Fatal("mark still there at 30 s")
		}
		r.net.Reset()
		r.ask("z.example.")
		if got := r.servers()[0]; got != rigServer(1) {
			t.Fatalf("at 30 s asked %v first, want 1 again", got)
		}
	})
}

// engine-servers.demotion-marks-address-for-30-seconds
func TestDemotionMarksAddressFor30Seconds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigScope(1))
		r.net.Handle(rigServer(1), memnet.Respond(memnet.Rcode(dns.RcodeRefused)))
		cfg := rigScope(1)
		cfg.Attempts = 1
		r.e.Reconfigure(cfg)
		start := time.Now()
		r.ask("x.example.")
		if got, want := r.demotedUntil(rigServer(1)), start.Add(30*time.Second); !got.Equal(want) {
			t.Fatalf("demoted until +%v, want +30s", got.Sub(start))
		}
		// A further failure 10 s later moves the mark forward to +40 s.
		time.Sleep(10 * time.Second)
		r.ask("x.example.")
		if got, want := r.demotedUntil(rigServer(1)), start.Add(40*time.Second); !got.Equal(want) {
			t.Fatalf("after a second failure demoted until +%v, want +40s", got.Sub(start))
		}
		time.Sleep(30*time.Second - time.Nanosecond)
		if !r.demoted(rigServer(1)) {
			t.Fatal("moved mark ended early")
		}
		time.Sleep(time.Nanosecond)
		if r.demoted(rigServer(1)) {
			t.Fatal("mark outlived 30 s after the last failure")
		}
	})
}

// engine-servers.good-reply-clears-demotion
func TestGoodReplyClearsDemotion(t *testing.T) {
	for _, rc := range []int{dns.RcodeSuccess, dns.RcodeNameError} {
		t.Run(dns.RcodeToString[rc], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newRig(t, rigScope(1))
				r.net.Handle(rigServer(1), func(c memnet.Conn) memnet.Action {
					if c.N == 0 {
						return memnet.Action{} // times out: demoted
					}
					return memnet.Action{Replies: []memnet.Reply{memnet.Rcode(rc)}}
				})
				var marks []bool // after each attempt
				r.log.onAttempt = func(engine.AttemptEvent) { marks = append(marks, r.demoted(rigServer(1))) }
				r.ask("x.example.")
				if len(marks) != 2 || !marks[0] {
					t.Fatalf("marks after each attempt %v, want the timeout to demote", marks)
				}
				if marks[1] {
					t.Fatalf("a %s reply left the mark", dns.RcodeToString[rc])
				}
			})
		})
	}
	t.Run("UDP TC does not clear, the TCP reply does", func(t *testing.T) {
		for _, rc := range []int{dns.RcodeSuccess, dns.RcodeNameError, dns.RcodeServerFailure} {
			synctest.Test(t, func(t *testing.T) {
				r := newRig(t, rigScope(1))
				r.net.Handle(rigServer(1), func(c memnet.Conn) memnet.Action {
					switch {
					case c.N == 0:
						return memnet.Action{SendError: &engine.SocketError{Op: "send", Class: engine.ErrUnreachable}}
					case c.Transport == engine.UDP:
						return memnet.Action{Replies: []memnet.Reply{memnet.Truncated(rc)}}
					}
					return memnet.Action{Replies: []memnet.Reply{memnet.Answer("@ 60 IN A 192.0.2.1")}}
				})
				var demotedAfterTC []bool
				r.log.onAttempt = func(ev engine.AttemptEvent) {
					if ev.Outcome == engine.OutcomeTruncated {
						demotedAfterTC = append(demotedAfterTC, r.demoted(rigServer(1)))
					}
				}
				res := r.ask("x.example.")
				want := []string{"udp/send_error", "udp/truncated", "tcp/answer"}
				if got := r.log.outcomes(); !equalStrings(got, want) {
					t.Fatalf("attempts %v, want %v", got, want)
				}
				if len(demotedAfterTC) != 1 || !demotedAfterTC[0] {
					t.Fatalf("TC reply with rcode %s cleared the mark", dns.RcodeToString[rc])
				}
				if r.demoted(rigServer(1)) || res.Result != engine.ResultAnswer {
					t.Fatal("the TCP answer did not clear the mark")
				}
			})
		}
	})
	t.Run("a failure rcode does not clear", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newRig(t, rigScope(1))
			r.net.Handle(rigServer(1), memnet.Respond(memnet.Rcode(dns.RcodeServerFailure)))
			r.ask("x.example.")
			if !r.demoted(rigServer(1)) {
				t.Fatal("SERVFAIL cleared the mark")
			}
		})
	})
}

// engine-servers.demotion-is-per-address
func TestDemotionIsPerAddress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shared, other := rigServer(1), rigServer(2)
		cfg := engine.Config{Scopes: []engine.ScopeConfig{
			{Name: "a", Domains: []string{"a.example."}, Servers: []string{shared.String()}},
			{Name: "b", Domains: []string{"b.example."}, Servers: []string{shared.String(), other.String()}},
		}}
		r := newRig(t, cfg)
		r.net.Handle(shared, memnet.Respond(memnet.Rcode(dns.RcodeServerFailure)))
		r.net.Handle(other, memnet.Respond(memnet.Answer("@ 60 IN A 192.0.2.2")))
		cfgA := cfg
		cfgA.Attempts = 1
		r.e.Reconfigure(cfgA)
		r.ask("www.a.example.") // fails in scope a
		r.e.Reconfigure(cfg)    // the mark survives a reload of the same address
		for _, s := range r.e.Status().Scopes {
			for _, sv := range s.Servers {
				if sv.Address == shared.String() && !sv.Demoted {
					t.Fatalf("scope %s does not show the shared address demoted", s.Name)
				}
			}
		}
		r.net.Reset()
		r.ask("www.b.example.")
		if got := r.servers()[0]; got != other {
			t.Fatalf("scope b asked %v first, want %v: the shared address is demoted there too", got, other)
		}
		// The same address written differently is the same address.
		cfg.Scopes[1].Servers = []string{"127.0.1.1", other.String()}
		r.e.Reconfigure(cfg)
		if !r.demoted(shared) {
			t.Fatal("127.0.1.1 and 127.0.1.1:53 do not share a mark")
		}
	})
}

// engine-servers.fallback-demotion-not-reported
func TestFallbackDemotionNotReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fb := rigServer(9)
		cfg := engine.Config{
			Scopes:          []engine.ScopeConfig{{Name: "corp", Domains: []string{"corp.example."}, Servers: []string{rigServer(1).String()}}},
			FallbackServers: []string{fb.String(), rigServer(8).String()},
		}
		r := newRig(t, cfg)
		r.net.Handle(fb, memnet.Respond(memnet.Rcode(dns.RcodeServerFailure)))
		r.net.Handle(rigServer(8), memnet.Respond(memnet.Answer("@ 60 IN A 192.0.2.8")))
		res := r.ask("www.elsewhere.example.") // no scope: the fallback servers
		if res.Scope != engine.FallbackScope || !r.log.attemptList()[0].Demoted {
			t.Fatalf("scope %q, first attempt demoted=%v: want the fallback server demoted", res.Scope, r.log.attemptList()[0].Demoted)
		}
		// It is demoted (the next question asks 8 first) ...
		r.net.Reset()
		r.ask("www2.elsewhere.example.")
		if got := r.servers()[0]; got != rigServer(8) {
			t.Fatalf("asked %v first, want the healthy fallback server", got)
		}
		// ... but the status lists the fallback servers without demotion.
		st := r.e.Status()
		if !equalStrings(st.FallbackServers, []string{fb.String(), rigServer(8).String()}) {
			t.Fatalf("fallback servers %v", st.FallbackServers)
		}
		for _, s := range st.Scopes {
			if s.Name == engine.FallbackScope {
				t.Fatal("the fallback servers appear as a scope with demotion state")
			}
		}
		b, _ := json.Marshal(st)
		i := strings.Index(string(b), `"fallback_servers"`)
		if i < 0 {
			t.Fatalf("no fallback_servers in %s", b)
		}
		tail := string(b[i:])
		tail = tail[:strings.Index(tail, "]")]
		if strings.Contains(tail, "demoted") {
			t.Fatalf("fallback servers report demotion: %s", tail)
		}
		// The scope's own servers do report.
		if len(st.Scopes) != 1 || len(st.Scopes[0].Servers) != 1 || st.Scopes[0].Servers[0].Address != rigServer(1).String() {
			t.Fatalf("scopes %+v", st.Scopes)
		}
	})
}
