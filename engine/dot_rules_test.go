package engine_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/enginetest"
	"github.com/dohfwd/dohfwd/engine/memnet"
)

// The engine's rules hold on every transport: one table, the transport a
// column. Each case runs under synctest on memnet, whose servers answer
// over UDP or over an in-memory DoT connection (memnet/dot.go) with the
// same Handler; every duration is exact. The cases name the rules
// (engine-servers.*) they restate.

// transports are the table's column.
var transports = []engine.Transport{engine.UDP, engine.DoT}

// rigOver is rigScope(n) with its servers reached over tr.
func rigOver(t *testing.T, n int, tr engine.Transport, tweak func(*engine.Config)) *rig {
	cfg := rigScope(n)
	if tr == engine.DoT {
		for i := range cfg.Scopes[0].Servers {
			cfg.Scopes[0].Servers[i] = dotURL(i + 1)
		}
	}
	if tweak != nil {
		tweak(&cfg)
	}
	r := newRig(t, cfg)
	t.Cleanup(func() { r.bg.Wait(); r.e.Close() }) // after the questions: the DoT connections' readers end
	return r
}

// dotURL is rigServer(i) as a DoT server.
func dotURL(i int) string { return "tls://" + rigServer(i).String() + "#memnet.test" }

// serverKey is how status names rigServer(i) over tr.
func serverKey(i int, tr engine.Transport) string {
	if tr == engine.DoT {
		return dotURL(i)
	}
	return rigServer(i).String()
}

// demotedOver reports whether status shows server i demoted.
func (r *rig) demotedOver(i int, tr engine.Transport) bool {
	for _, sv := range r.e.Status().Scopes[0].Servers {
		if sv.Address == serverKey(i, tr) {
			return sv.Demoted
		}
	}
	r.t.Fatalf("no server %s in status", serverKey(i, tr))
	return false
}

// outcomesOnly lists the attempts' outcomes without their transports.
func (l *eventLog) outcomesOnly() []string {
	var out []string
	for _, a := range l.attemptList() {
		out = append(out, a.Outcome.String())
	}
	return out
}

var dotAnswerA = memnet.Answer("@ 60 IN A 192.0.2.1")

func TestRulesOverTransports(t *testing.T) {
	cases := []struct {
		rule string
		run  func(t *testing.T, tr engine.Transport)
	}{
		{"engine-servers.timeout-fails-attempt", func(t *testing.T, tr engine.Transport) {
			r := rigOver(t, 1, tr, nil)
			start := time.Now()
			res := r.ask("x.example.")
			if res.Result != engine.ResultUnavailable || time.Since(start) != 6*time.Second {
				t.Fatalf("%v after %v, want unavailable after three 2s timeouts", res.Result, time.Since(start))
			}
			if got := r.log.outcomesOnly(); !equalStrings(got, []string{"timeout", "timeout", "timeout"}) {
				t.Fatalf("outcomes %v", got)
			}
		}},
		{"engine-servers.single-server-gets-every-attempt", func(t *testing.T, tr engine.Transport) {
			r := rigOver(t, 1, tr, nil)
			r.net.Handle(rigServer(1), memnet.Respond(memnet.Rcode(dns.RcodeServerFailure)))
			res := r.ask("x.example.")
			if res.Attempts != 3 || len(r.net.Transactions()) != 3 {
				t.Fatalf("%d attempts, %d transactions; want 3 to the one server", res.Attempts, len(r.net.Transactions()))
			}
		}},
		{"engine-servers.healthy-first-then-demoted", func(t *testing.T, tr engine.Transport) {
			r := rigOver(t, 2, tr, nil)
			r.net.Handle(rigServer(2), memnet.Respond(dotAnswerA))
			r.ask("one.example.") // 1 times out, is demoted; 2 answers
			if !r.demotedOver(1, tr) {
				t.Fatal("server 1 not demoted after its timeout")
			}
			r.net.Reset()
			r.ask("two.example.")
			if s := r.servers(); len(s) != 1 || s[0] != rigServer(2) {
				t.Fatalf("asked %v, want the healthy server 2 first", s)
			}
		}},
		{"engine-servers.demotion-marks-address-for-30-seconds", func(t *testing.T, tr engine.Transport) {
			r := rigOver(t, 2, tr, nil)
			r.net.Handle(rigServer(2), memnet.Respond(dotAnswerA))
			r.ask("one.example.")
			time.Sleep(30*time.Second - time.Nanosecond) // the mark began at the timeout, when the answer came
			if !r.demotedOver(1, tr) {
				t.Fatal("mark gone before 30 s")
			}
			time.Sleep(time.Nanosecond)
			if r.demotedOver(1, tr) {
				t.Fatal("mark still there at 30 s")
			}
		}},
		{"engine-servers.failure-rcodes-fail-attempt", func(t *testing.T, tr engine.Transport) {
			r := rigOver(t, 2, tr, nil)
			r.net.Handle(rigServer(1), memnet.Respond(memnet.Rcode(dns.RcodeRefused)))
			r.net.Handle(rigServer(2), memnet.Respond(dotAnswerA))
			res := r.ask("x.example.")
			if res.Result != engine.ResultAnswer || !equalStrings(r.log.outcomesOnly(), []string{"rcode", "answer"}) || !r.demotedOver(1, tr) {
				t.Fatalf("%v %v", res.Result, r.log.outcomesOnly())
			}
		}},
		{"engine-servers.good-reply-clears-demotion", func(t *testing.T, tr engine.Transport) {
			r := rigOver(t, 1, tr, nil)
			fail := true
			r.net.Handle(rigServer(1), func(memnet.Conn) memnet.Action {
				if fail {
					fail = false
					return memnet.Action{Replies: []memnet.Reply{memnet.Rcode(dns.RcodeServerFailure)}}
				}
				return memnet.Action{Replies: []memnet.Reply{dotAnswerA}}
			})
			res := r.ask("x.example.")
			if res.Result != engine.ResultAnswer || r.demotedOver(1, tr) {
				t.Fatalf("%v, demoted %v: the answer should clear the mark", res.Result, r.demotedOver(1, tr))
			}
		}},
		{"engine-servers.tcp-connect-failure-fails-attempt", func(t *testing.T, tr engine.Transport) {
			// A refused connect (DoT) or ICMP refusal (UDP) fails the
			// attempt at once, not after the timeout.
			r := rigOver(t, 2, tr, nil)
			op := "receive"
			if tr == engine.DoT {
				op = "connect"
			}
			r.net.Handle(rigServer(1), memnet.Fail(op, engine.ErrRefused))
			r.net.Handle(rigServer(2), memnet.Respond(dotAnswerA))
			start := time.Now()
			res := r.ask("x.example.")
			if res.Result != engine.ResultAnswer || time.Since(start) != 0 || !r.demotedOver(1, tr) {
				t.Fatalf("%v after %v (%v), want the answer at once, server 1 demoted", res.Result, time.Since(start), r.log.outcomesOnly())
			}
		}},
		{"engine-servers.third-failure-is-unavailable", func(t *testing.T, tr engine.Transport) {
			r := rigOver(t, 3, tr, nil)
			r.net.Handle(rigServer(1), memnet.Respond(memnet.Rcode(dns.RcodeServerFailure)))
			r.net.Handle(rigServer(2), memnet.Fail("receive", engine.ErrReset))
			res := r.ask("x.example.")
			if res.Result != engine.ResultUnavailable || res.Attempts != 3 || edeCode(res.Msg) != int(dns.ExtendedErrorCodeNoReachableAuthority) {
				t.Fatalf("%v after %d, EDE %d", res.Result, res.Attempts, edeCode(res.Msg))
			}
			if text := edeText(res.Msg); !strings.Contains(text, serverKey(1, tr)+"/"+tr.String()) {
				t.Fatalf("EDE text %q does not name server 1 over %v", text, tr)
			}
		}},
		{"engine-servers.in-flight-ceiling-refuses-new-transactions", func(t *testing.T, tr engine.Transport) {
			r := rigOver(t, 1, tr, func(c *engine.Config) { c.InFlightCeiling = 2 })
			for i := range 2 {
				q := newQuery(fmt.Sprintf("fill%d.example.", i), dns.TypeA)
				r.bg.Go(func() { enginetest.Resolve(r.e, context.Background(), q) })
			}
			synctest.Wait()
			res := r.ask("refused.example.")
			if res.Result != engine.ResultUnavailable || res.Reason != engine.ReasonInFlightCeiling || r.e.Counters().Refused != 1 {
				t.Fatalf("%v (%v), refused %d", res.Result, res.Reason, r.e.Counters().Refused)
			}
		}},
		{"cancelled: the client's going away is not charged", func(t *testing.T, tr engine.Transport) {
			r := rigOver(t, 1, tr, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			res := enginetest.Resolve(r.e, ctx, newQuery("x.example.", dns.TypeA))
			if res.Result == engine.ResultAnswer || !equalStrings(r.log.outcomesOnly(), []string{"cancelled"}) || r.demotedOver(1, tr) {
				t.Fatalf("%v %v demoted %v", res.Result, r.log.outcomesOnly(), r.demotedOver(1, tr))
			}
			if c := r.e.Counters(); c.UpstreamFailed != 0 {
				t.Fatalf("upstream_failed %d", c.UpstreamFailed)
			}
		}},
		{"serve-stale: an expired answer when the server fails", func(t *testing.T, tr engine.Transport) {
			r := rigOver(t, 1, tr, func(c *engine.Config) { c.Cache = engine.CacheConfig{MaxEntries: 10, StaleMax: time.Hour} })
			ok := true
			r.net.Handle(rigServer(1), func(memnet.Conn) memnet.Action {
				if ok {
					return memnet.Action{Replies: []memnet.Reply{dotAnswerA}}
				}
				return memnet.Action{Replies: []memnet.Reply{memnet.Rcode(dns.RcodeServerFailure)}}
			})
			r.ask("x.example.")
			ok = false
			time.Sleep(2 * time.Minute)
			res := r.ask("x.example.")
			if res.Result != engine.ResultStale || len(res.Msg.Answer) != 1 {
				t.Fatalf("%v %v, want the stale answer", res.Result, res.Msg.Answer)
			}
		}},
	}
	for _, c := range cases {
		for _, tr := range transports {
			t.Run(c.rule+"/"+tr.String(), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) { c.run(t, tr) })
			})
		}
	}
}

// TC does not apply on an encrypted transport: a reply with TC set is
// used as it is, no TCP retry (UDP's truncated reply is retried over TCP).
func TestDoTTruncatedReplyUsed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := rigOver(t, 1, engine.DoT, nil)
		r.net.Handle(rigServer(1), memnet.Respond(memnet.Truncated(dns.RcodeSuccess)))
		res := r.ask("x.example.")
		if res.Result != engine.ResultAnswer || !equalStrings(r.log.outcomes(), []string{"dot/answer"}) {
			t.Fatalf("%v %v, want the TC reply used as the answer", res.Result, r.log.outcomes())
		}
	})
}

// An unused DoT connection is closed after its idle time (30 s by
// default), not before; the next question opens a new one, which resumes
// its TLS session, and connections are not reopened per question.
func TestDoTIdleClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := rigOver(t, 1, engine.DoT, nil)
		r.net.Handle(rigServer(1), memnet.Respond(dotAnswerA))
		for i := range 3 {
			r.ask(fmt.Sprintf("q%d.example.", i))
			time.Sleep(10 * time.Second) // busy enough to stay open
		}
		if n := r.net.TLSConnections(); n != 1 {
			t.Fatalf("%d connections for three questions 10 s apart, want 1", n)
		}
		time.Sleep(engine.DefaultEncryptedIdle - 10*time.Second - time.Nanosecond)
		synctest.Wait()
		if r.net.OpenSockets() != 1 {
			t.Fatal("closed before its idle time")
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if r.net.OpenSockets() != 0 {
			t.Fatal("open past its idle time")
		}
		r.ask("after.example.")
		evs := r.log.attemptList()
		if last := evs[len(evs)-1]; last.Conn != engine.ConnResumed || last.Outcome != engine.OutcomeAnswer {
			t.Fatalf("after the idle close: %+v, want an answer on a new, resumed connection", last)
		}
	})
}

// A connection the server ends (its close, a reset) while a question waits
// on it: the question goes again on a new connection within its attempt,
// and is answered; the attempt is not failed. The retry is bounded: a
// server that ends every connection fails the attempt.
func TestDoTReconnectWithinAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := rigOver(t, 1, engine.DoT, nil)
		n := 0
		r.net.Handle(rigServer(1), func(memnet.Conn) memnet.Action {
			n++
			if n == 2 { // the second question's query: the connection dies under it
				return memnet.Action{ReceiveError: &engine.SocketError{Op: "receive", Class: engine.ErrReset}, ReceiveDelay: 100 * time.Millisecond}
			}
			return memnet.Action{Replies: []memnet.Reply{memnet.After(50*time.Millisecond, dotAnswerA)}}
		})
		r.ask("one.example.")
		start := time.Now()
		res := r.ask("two.example.")
		if res.Result != engine.ResultAnswer || res.Attempts != 1 || time.Since(start) != 150*time.Millisecond {
			t.Fatalf("%v in %d attempts after %v: want the answer in one attempt, on a new connection, at 150ms", res.Result, res.Attempts, time.Since(start))
		}
		if r.net.TLSConnections() != 2 {
			t.Fatalf("%d connections", r.net.TLSConnections())
		}

		r2 := rigOver(t, 1, engine.DoT, nil)
		r2.net.Handle(rigServer(1), func(memnet.Conn) memnet.Action {
			return memnet.Action{Close: true}
		})
		res = r2.ask("x.example.")
		if res.Result != engine.ResultUnavailable || !equalStrings(r2.log.outcomesOnly(), []string{"recv_error", "recv_error", "recv_error"}) {
			t.Fatalf("%v %v: a server that ends every connection fails each attempt", res.Result, r2.log.outcomesOnly())
		}
	})
}

// A failed handshake is a failed attempt that demotes like a timeout, and
// says so: handshake_error, and "tls handshake tls" in the EDE.
func TestDoTHandshakeErrorDemotes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := rigOver(t, 2, engine.DoT, nil)
		r.net.Handle(rigServer(1), memnet.Fail("connect", engine.ErrTLS))
		r.net.Handle(rigServer(1), func(memnet.Conn) memnet.Action {
			return memnet.Action{OpenError: &engine.SocketError{Op: "handshake", Class: engine.ErrTLS}}
		})
		res := r.ask("x.example.")
		if res.Result != engine.ResultUnavailable || !r.demotedOver(1, engine.DoT) {
			t.Fatalf("%v", res.Result)
		}
		if got := r.log.outcomesOnly(); got[0] != "handshake_error" {
			t.Fatalf("outcomes %v", got)
		}
		if text := edeText(res.Msg); !strings.Contains(text, dotURL(1)+"/dot tls handshake tls") {
			t.Fatalf("EDE text %q", text)
		}
	})
}

// Background probes of a demoted DoT server go over its kept connection,
// not a new TLS connection each (coredns#3620); the server answering
// REFUSED keeps its mark and its connection.
func TestDoTProbesReuseConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := rigOver(t, 2, engine.DoT, func(c *engine.Config) { c.Probe = true })
		r.net.Handle(rigServer(1), memnet.Respond(memnet.Rcode(dns.RcodeRefused)))
		r.net.Handle(rigServer(2), memnet.Respond(dotAnswerA))
		r.ask("x.example.")
		time.Sleep(3 * time.Minute)
		synctest.Wait()
		probes := 0
		for _, tx := range r.net.Transactions() {
			if tx.Server == rigServer(1) && tx.Query != nil && tx.Query.Question[0].Name == "." {
				probes++
			}
		}
		if probes < 5 || !r.demotedOver(1, engine.DoT) {
			t.Fatalf("%d probes in 3 minutes, demoted %v", probes, r.demotedOver(1, engine.DoT))
		}
		if n := r.net.TLSConnections(); n != 2 { // one per server
			t.Fatalf("%d TLS connections for %d probes, want one per server", n, probes)
		}
		cs := r.e.Status().Scopes[0].Servers[0].Connections
		if cs.Handshakes != 1 || cs.Reused != uint64(probes) {
			t.Fatalf("server 1's connections %+v after %d probes", cs, probes)
		}
	})
}
