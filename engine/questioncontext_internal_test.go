package engine

import (
	"context"
	"net/netip"
	"testing"
)

// TestDetachedContextOutlivesTheQuestionContext: a detached question
// (raceStale's upstream question, which may outlive its client's) keeps
// the client and trace its question had after the front end sets its
// QuestionContext again for the next request, and has no cancellation.
func TestDetachedContextOutlivesTheQuestionContext(t *testing.T) {
	a, b := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	var cancel, next CancelContext
	var qc QuestionContext
	ctx := qc.Set(&cancel, a, &Trace{ID: [16]byte{1}})
	dctx, dtrace := detachedContext(ctx, TraceFrom(ctx))
	cancel.Cancel()
	qc.Set(&next, b, &Trace{ID: [16]byte{2}})
	if ClientOf(dctx) != a || dtrace == nil || dtrace.ID[0] != 1 || TraceFrom(dctx) != dtrace {
		t.Fatalf("detached: client %v trace %v, want %v and the first trace", ClientOf(dctx), dtrace, a)
	}
	if dctx.Done() != nil || dctx.Err() != nil || cancelWatcherOf(dctx) != nil {
		t.Fatal("the detached context ends with its client's")
	}
	// Any other context is detached as before.
	other := WithClient(context.Background(), a)
	if d, tr := detachedContext(other, nil); ClientOf(d) != a || tr != nil {
		t.Fatalf("detached from another context: client %v trace %v", ClientOf(d), tr)
	}
}

// TestFlightKeepsCopiesOfTraces: a flight keeps its leader's and its
// followers' traces by value, and a question that shares it gets copies
// of its own: a question's trace may lie in its front end's
// QuestionContext, set again once that question returns, while the
// flight and the others' events still read them.
func TestFlightKeepsCopiesOfTraces(t *testing.T) {
	var f flights
	k := cacheKey{name: "traced.example.", qtype: 1, qclass: 1}
	leader, follower := &Trace{ID: [16]byte{1}}, &Trace{ID: [16]byte{2}}
	fl, _ := f.join(k, leader)
	f.join(k, follower)
	leader.ID[0], follower.ID[0] = 8, 9 // both front ends set theirs again
	if fl.leader.ID[0] != 1 || len(fl.served) != 1 || fl.served[0].ID[0] != 2 {
		t.Fatalf("the flight's traces changed with their questions': leader %v served %v", fl.leader, fl.served)
	}
	fl.leaderID = 1
	var lead, follow question
	lead.id, follow.id = 1, 2
	lead.joined(fl, true)
	follow.joined(fl, false)
	f.land(k, fl, nil)
	fl.release()
	fl.release() // back in the pool: what the questions got is their own
	if follow.shared == nil || follow.shared.joined == nil || follow.shared.joined.ID[0] != 1 {
		t.Fatalf("the follower's joined trace: %+v", follow.shared)
	}
	if lead.shared == nil || len(lead.shared.served) != 1 || lead.shared.served[0].ID[0] != 2 {
		t.Fatalf("the leader's served traces: %+v", lead.shared)
	}
}
