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
	"github.com/miekg/dns"
)

func traceN(n byte) engine.Trace {
	return engine.Trace{ID: [16]byte{n}, Span: [8]byte{n}, Parent: [8]byte{n}, HasParent: true}
}

// A question's trace is on each of its attempt events and on its question
// event.
func TestTraceOnQuestionAndAttemptEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigScope(2))
		r.net.Handle(rigServer(1), memnet.Respond(memnet.Rcode(dns.RcodeServerFailure)))
		r.net.Handle(rigServer(2), memnet.Respond(memnet.Answer("@ 60 IN A 192.0.2.2")))
		enginetest.Resolve(r.e, engine.WithTrace(context.Background(), traceN(7)), newQuery("x.example.", dns.TypeA))
		atts := r.log.attemptList()
		if len(atts) != 2 {
			t.Fatalf("%d attempts", len(atts))
		}
		for _, a := range atts {
			if a.Trace == nil || *a.Trace != traceN(7) {
				t.Fatalf("attempt %d: trace %v", a.Attempt, a.Trace)
			}
		}
		if q := r.log.questionList()[0]; q.Trace == nil || *q.Trace != traceN(7) || q.Served != nil || q.Joined != nil {
			t.Fatalf("question event: %+v", q)
		}
		r.ask("y.example.")
		if q := r.log.questionList()[1]; q.Trace != nil {
			t.Fatalf("question without a trace has %v", q.Trace)
		}
	})
}

// Identical questions asked together share one upstream question: its
// question event lists the traces of all it served, and each one that
// waited names the trace it joined.
func TestCoalescedQuestionListsEveryTraceItServed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := rigScope(1)
		cfg.Cache.MaxEntries = 100
		r := newRig(t, cfg)
		r.net.Handle(rigServer(1), memnet.Respond(memnet.After(100*time.Millisecond, memnet.Answer("@ 60 IN A 192.0.2.2"))))
		var wg sync.WaitGroup
		for i := byte(1); i <= 3; i++ {
			wg.Go(func() {
				enginetest.Resolve(r.e, engine.WithTrace(context.Background(), traceN(i)), newQuery("same.example.", dns.TypeA))
			})
			synctest.Wait() // in order: 1 leads, 2 and 3 join
		}
		wg.Wait()
		if n := len(r.net.Transactions()); n != 1 {
			t.Fatalf("%d transactions, want 1", n)
		}
		wantLeaderServedTwo(t, r.log.questionList())
	})
}

// wantLeaderServedTwo checks the question events of a flight that trace 1
// led and traces 2 and 3 followed: the leader's event lists both as
// served, in order, and each follower's names trace 1 as the one it
// joined.
func wantLeaderServedTwo(t *testing.T, events []engine.QuestionEvent) {
	t.Helper()
	var leader engine.QuestionEvent
	joined := 0
	for _, q := range events {
		switch {
		case q.Attempts == 1:
			leader = q
		case q.Joined != nil && *q.Joined == traceN(1) && q.Trace != nil && (*q.Trace == traceN(2) || *q.Trace == traceN(3)):
			joined++
		}
	}
	if leader.Trace == nil || *leader.Trace != traceN(1) || len(leader.Served) != 2 ||
		*leader.Served[0] != traceN(2) || *leader.Served[1] != traceN(3) {
		t.Fatalf("leader's event: %+v", leader)
	}
	if joined != 2 {
		t.Fatalf("%d followers name the leader's trace as joined, want 2", joined)
	}
}
