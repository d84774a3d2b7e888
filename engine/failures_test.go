package engine_test

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/memnet"
	"github.com/miekg/dns"
)

// Rules of "What fails an attempt": each failure ends the transaction,
// adds one to upstream_failed, demotes the server and moves on.

// failCase is one failure, given by a handler for server 1; server 2
// answers, so the question's second attempt shows that it moved on.
type failCase struct {
	name    string
	h       memnet.Handler
	outcome engine.Outcome
	after   time.Duration // how long the failing transaction lasted
}

// checkFailure runs c and checks the rule: the transaction ends after
// c.after (0: at once), upstream_failed +1, server 1 demoted, the next
// attempt goes to server 2.
func checkFailure(t *testing.T, c failCase) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigScope(2))
		r.net.Handle(rigServer(1), c.h)
		r.net.Handle(rigServer(2), memnet.Respond(memnet.Answer("@ 60 IN A 192.0.2.2")))
		start := time.Now()
		res := r.ask("x.example.")
		atts := r.log.attemptList()
		if len(atts) != 2 {
			t.Fatalf("attempts %v, want the failure then the answer", r.log.outcomes())
		}
		first := atts[0]
		if first.Outcome != c.outcome || first.Server != rigServer(1) || !first.Demoted {
			t.Fatalf("first attempt %v to %v demoted=%v, want %v to %v demoted", first.Outcome, first.Server, first.Demoted, c.outcome, rigServer(1))
		}
		if atts[1].Server != rigServer(2) || res.Result != engine.ResultAnswer {
			t.Fatalf("second attempt to %v gave %v, want server 2's answer", atts[1].Server, res.Result)
		}
		txs := r.net.Transactions()
		if got := txs[0].Closed.Sub(start); got != c.after {
			t.Fatalf("failing transaction lasted %v, want %v", got, c.after)
		}
		if got := r.e.Counters().UpstreamFailed; got != 1 {
			t.Fatalf("upstream_failed = %d, want 1", got)
		}
		if !r.demoted(rigServer(1)) {
			t.Fatal("server 1 not demoted in status")
		}
	})
}

// engine-servers.timeout-fails-attempt
func TestTimeoutFailsAttempt(t *testing.T) {
	checkFailure(t, failCase{h: memnet.Silent(), outcome: engine.OutcomeTimeout, after: 2 * time.Second})
	// A reply that comes too late is a timeout all the same.
	checkFailure(t, failCase{h: memnet.Respond(memnet.After(2*time.Second+time.Millisecond, memnet.Answer("@ 1 IN A 192.0.2.1"))),
		outcome: engine.OutcomeTimeout, after: 2 * time.Second})
}

// engine-servers.send-error-fails-attempt-at-once
func TestSendErrorFailsAttemptAtOnce(t *testing.T) {
	for _, op := range []string{"open", "bind", "connect", "send"} {
		for _, class := range []engine.ErrorClass{engine.ErrUnreachable, engine.ErrRefused, engine.ErrOther, engine.ErrReset, engine.ErrClosed} {
			t.Run(fmt.Sprintf("%s/%v", op, class), func(t *testing.T) {
				checkFailure(t, failCase{h: memnet.Fail(op, class), outcome: engine.OutcomeSendError})
			})
		}
	}
}

// engine-servers.udp-receive-error-fails-attempt
func TestUDPReceiveErrorFailsAttempt(t *testing.T) {
	for _, class := range []engine.ErrorClass{engine.ErrRefused, engine.ErrUnreachable, engine.ErrOther} {
		t.Run(class.String(), func(t *testing.T) {
			checkFailure(t, failCase{h: memnet.Fail("receive", class), outcome: engine.OutcomeRecvError})
		})
	}
	// The refusal may come after a delay (ICMP takes a round trip): the
	// attempt fails when it comes, not at the timeout.
	checkFailure(t, failCase{h: func(memnet.Conn) memnet.Action {
		return memnet.Action{ReceiveError: &engine.SocketError{Op: "receive", Class: engine.ErrRefused}, ReceiveDelay: 300 * time.Millisecond}
	}, outcome: engine.OutcomeRecvError, after: 300 * time.Millisecond})
}

// truncatedThen is a server that truncates over UDP and behaves as tcp
// over TCP.
func truncatedThen(tcp memnet.Handler) memnet.Handler {
	return memnet.ByTransport(memnet.Respond(memnet.Truncated(dns.RcodeSuccess)), tcp)
}

// checkTCPFailure runs a question whose server truncates over UDP and then
// fails over TCP as tcp says; server 2 answers the third attempt.
func checkTCPFailure(t *testing.T, tcp memnet.Handler, outcome engine.Outcome, after time.Duration) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigScope(2))
		r.net.Handle(rigServer(1), truncatedThen(tcp))
		r.net.Handle(rigServer(2), memnet.Respond(memnet.Answer("@ 60 IN A 192.0.2.2")))
		res := r.ask("x.example.")
		want := []string{"udp/truncated", "tcp/" + outcome.String(), "udp/answer"}
		if got := r.log.outcomes(); !equalStrings(got, want) {
			t.Fatalf("attempts %v, want %v", got, want)
		}
		atts := r.log.attemptList()
		if atts[1].Server != rigServer(1) || !atts[1].Demoted || atts[2].Server != rigServer(2) {
			t.Fatalf("TCP attempt to %v demoted=%v, then %v; want server 1 demoted then server 2", atts[1].Server, atts[1].Demoted, atts[2].Server)
		}
		txs := r.net.Transactions()
		if d := txs[1].Closed.Sub(txs[1].Opened); d != after {
			t.Fatalf("TCP transaction lasted %v, want %v", d, after)
		}
		if res.Result != engine.ResultAnswer || r.e.Counters().UpstreamFailed != 1 || !r.demoted(rigServer(1)) {
			t.Fatalf("result %v upstream_failed %d demoted %v", res.Result, r.e.Counters().UpstreamFailed, r.demoted(rigServer(1)))
		}
	})
}

// engine-servers.tcp-connect-failure-fails-attempt
func TestTCPConnectFailureFailsAttempt(t *testing.T) {
	for _, class := range []engine.ErrorClass{engine.ErrRefused, engine.ErrReset, engine.ErrClosed, engine.ErrUnreachable, engine.ErrOther} {
		t.Run(class.String(), func(t *testing.T) {
			checkTCPFailure(t, memnet.Fail("connect", class), engine.OutcomeConnectError, 0)
		})
	}
	// A connection that hangs until the deadline fails as a timeout.
	t.Run("hang", func(t *testing.T) {
		checkTCPFailure(t, memnet.Fail("connect", engine.ErrTimeout), engine.OutcomeTimeout, 0)
	})
}

// engine-servers.tcp-error-before-query-sent-fails-attempt
func TestTCPErrorBeforeQuerySentFailsAttempt(t *testing.T) {
	for _, class := range []engine.ErrorClass{engine.ErrReset, engine.ErrClosed, engine.ErrOther} {
		t.Run(class.String(), func(t *testing.T) {
			checkTCPFailure(t, memnet.Fail("send", class), engine.OutcomeSendError, 0)
		})
	}
}

// engine-servers.tcp-incomplete-reply-fails-attempt
func TestTCPIncompleteReplyFailsAttempt(t *testing.T) {
	answer := memnet.Answer("@ 60 IN A 192.0.2.1")
	t.Run("close mid-reply", func(t *testing.T) {
		checkTCPFailure(t, func(memnet.Conn) memnet.Action {
			return memnet.Action{Replies: []memnet.Reply{memnet.After(100*time.Millisecond, memnet.Cut(answer))}, Close: true}
		}, engine.OutcomeRecvError, 100*time.Millisecond)
	})
	t.Run("close before any reply", func(t *testing.T) {
		checkTCPFailure(t, func(memnet.Conn) memnet.Action { return memnet.Action{Close: true} }, engine.OutcomeRecvError, 0)
	})
	t.Run("close after a reply that does not match", func(t *testing.T) {
		checkTCPFailure(t, func(memnet.Conn) memnet.Action {
			return memnet.Action{Replies: []memnet.Reply{memnet.WrongID(answer)}, Close: true}
		}, engine.OutcomeRecvError, 0)
	})
	t.Run("read error", func(t *testing.T) {
		checkTCPFailure(t, memnet.Fail("receive", engine.ErrReset), engine.OutcomeRecvError, 0)
	})
	t.Run("half a reply then silence", func(t *testing.T) {
		checkTCPFailure(t, memnet.Respond(memnet.Cut(answer)), engine.OutcomeTimeout, 2*time.Second)
	})
}

// engine-servers.failure-rcodes-fail-attempt
func TestFailureRcodesFailAttempt(t *testing.T) {
	codes := []int{dns.RcodeFormatError, dns.RcodeServerFailure, dns.RcodeNotImplemented, dns.RcodeRefused,
		dns.RcodeYXDomain, dns.RcodeNotAuth, 11, 15,
		dns.RcodeBadVers, dns.RcodeBadCookie, 4000} // EDNS extended rcodes
	for _, rc := range codes {
		t.Run(dns.RcodeToString[rc]+fmt.Sprint(rc), func(t *testing.T) {
			checkFailure(t, failCase{h: memnet.Respond(memnet.Rcode(rc)), outcome: engine.OutcomeRcode})
		})
	}
	// The rcode reaches the attempt event.
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigScope(1))
		r.net.Handle(rigServer(1), memnet.Respond(memnet.Rcode(dns.RcodeBadVers)))
		r.ask("x.example.")
		if a := r.log.attemptList()[0]; a.Rcode != dns.RcodeBadVers {
			t.Fatalf("event rcode %d, want %d", a.Rcode, dns.RcodeBadVers)
		}
	})
}

// The local resource and permission errors spend the attempt and count
// upstream_failed, but do not demote.
// engine-servers.send-error-fails-attempt-at-once (exceptions)
func TestLocalErrorsDoNotDemote(t *testing.T) {
	for _, op := range []string{"open", "bind", "connect", "send"} {
		t.Run(op, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newRig(t, rigScope(2))
				r.net.Handle(rigServer(1), memnet.Fail(op, engine.ErrLocal))
				r.net.Handle(rigServer(2), memnet.Fail(op, engine.ErrLocal))
				start := time.Now()
				res := r.ask("x.example.")
				want := []string{"udp/local_error", "udp/local_error", "udp/local_error"}
				if got := r.log.outcomes(); !equalStrings(got, want) {
					t.Fatalf("attempts %v, want %v", got, want)
				}
				if time.Since(start) != 0 {
					t.Fatalf("local errors took %v, want at once", time.Since(start))
				}
				c := r.e.Counters()
				if c.UpstreamFailed != 3 || res.Result != engine.ResultUnavailable || res.Reason != engine.ReasonAttemptsSpent {
					t.Fatalf("upstream_failed %d, result %v (%v); want 3, unavailable (attempts spent)", c.UpstreamFailed, res.Result, res.Reason)
				}
				for _, a := range r.log.attemptList() {
					if a.Demoted {
						t.Fatal("a local error demoted its server")
					}
				}
				if r.demoted(rigServer(1)) || r.demoted(rigServer(2)) {
					t.Fatal("status shows a server demoted by a local error")
				}
			})
		})
	}
}
