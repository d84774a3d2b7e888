package engine_test

import (
	"context"
	"io"
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/enginetest"
	"github.com/dohfwd/dohfwd/engine/memnet"
	"github.com/miekg/dns"
)

// watchingContext is a client context that is an engine.CancelWatcher and
// records what it is asked. Its Done would not end the transaction alone:
// a canceled watchingContext closes the sockets watched, as the front
// end's does, and the test checks the engine relies on that.
type watchingContext struct {
	context.Context // Background: Done is nil, so context.AfterFunc is never used
	mu              sync.Mutex
	err             error
	watched         []io.Closer
	watches, closed int
	stops           []bool
}

func (c *watchingContext) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *watchingContext) cancel() {
	c.mu.Lock()
	c.err = context.Canceled
	w := c.watched
	c.watched = nil
	c.closed += len(w)
	c.mu.Unlock()
	for _, x := range w {
		x.Close()
	}
}

func (c *watchingContext) CloseOnCancel(x io.Closer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.watches++
	c.watched = append(c.watched, x)
}

func (c *watchingContext) StopClosing(x io.Closer) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, y := range c.watched {
		if y == x {
			c.watched = append(c.watched[:i], c.watched[i+1:]...)
			c.stops = append(c.stops, true)
			return true
		}
	}
	c.stops = append(c.stops, false)
	return false
}

// TestCancelWatcherClosesTheSocket: with a client context that is a
// CancelWatcher (under WithClientTrace, as the HTTP/2 front end passes
// it), a client that goes away closes its transaction's socket
// through the watcher at once: the question is cancelled, not charged, its
// in-flight slot free, and the watch reports the socket closed.
func TestCancelWatcherClosesTheSocket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := rigScope(1)
		cfg.TransactionTimeout = time.Minute
		r := newRig(t, cfg)
		wc := &watchingContext{Context: context.Background()}
		ctx := engine.WithClientTrace(wc, netip.MustParseAddr("192.0.2.1"), engine.Trace{})
		time.AfterFunc(700*time.Millisecond, wc.cancel)
		start := time.Now()
		res := enginetest.Resolve(r.e, ctx, newQuery("x.example.", dns.TypeA))
		if res.Result != engine.ResultCancelled || time.Since(start) != 700*time.Millisecond {
			t.Fatalf("%v after %v, want cancelled when the client left at 700ms", res.Result, time.Since(start))
		}
		tx := r.net.Transactions()
		if len(tx) != 1 || tx[0].Closed.Sub(start) != 700*time.Millisecond {
			t.Fatalf("transactions %+v, want one closed at 700ms", tx)
		}
		if r.net.OpenSockets() != 0 || r.e.InFlight() != 0 {
			t.Fatalf("%d sockets open, %d in flight after the cancel", r.net.OpenSockets(), r.e.InFlight())
		}
		wc.mu.Lock()
		defer wc.mu.Unlock()
		if wc.watches != 1 || wc.closed != 1 || len(wc.stops) != 1 || wc.stops[0] {
			t.Fatalf("watches %d, closed %d, stops %v: want one watch, closed by the cancel, its stop false", wc.watches, wc.closed, wc.stops)
		}
		notCharged(t, r, 1)
	})
}

// TestCancelWatcherEndsEachWatch: a question answered after a truncated
// UDP reply (two transactions) leaves nothing watched, each watch ended
// while its socket was still open. The watcher is found under WithTrace
// and WithClient apart too.
func TestCancelWatcherEndsEachWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigScope(1))
		r.net.Handle(rigServer(1), memnet.ByTransport(
			memnet.Respond(memnet.Truncated(dns.RcodeSuccess)),
			memnet.Respond(memnet.Answer("@ 60 IN A 192.0.2.7"))))
		wc := &watchingContext{Context: context.Background()}
		ctx := engine.WithTrace(engine.WithClient(wc, netip.MustParseAddr("192.0.2.1")), engine.Trace{})
		res := enginetest.Resolve(r.e, ctx, newQuery("x.example.", dns.TypeA))
		if res.Result != engine.ResultAnswer {
			t.Fatalf("%v, want an answer", res.Result)
		}
		wc.mu.Lock()
		defer wc.mu.Unlock()
		if wc.watches != 2 || len(wc.watched) != 0 || len(wc.stops) != 2 || !wc.stops[0] || !wc.stops[1] {
			t.Fatalf("watches %d, left %d, stops %v: want two, each ended", wc.watches, len(wc.watched), wc.stops)
		}
	})
}

// TestWithClientNamesTheClient: the client WithClient or WithClientTrace
// names is found through WithTrace and through a detached copy, and so is
// the trace.
func TestWithClientNamesTheClient(t *testing.T) {
	a := netip.MustParseAddr("2001:db8::1")
	tr := engine.Trace{ID: [16]byte{1}, Span: [8]byte{2}}
	var qc, qcClient, qcTrace engine.QuestionContext
	for name, ctx := range map[string]context.Context{
		"WithClient then WithTrace": engine.WithTrace(engine.WithClient(context.Background(), a), tr),
		"WithClientTrace":           engine.WithClientTrace(context.Background(), a, tr),
		"QuestionContext.Set":       qc.Set(context.Background(), a, &tr),
		"Set client, then trace":    qcTrace.Set(qcClient.Set(context.Background(), a, nil), netip.Addr{}, &tr),
	} {
		if got := engine.ClientOf(ctx); got != a {
			t.Fatalf("%s: ClientOf %v, want %v", name, got, a)
		}
		detached := context.WithoutCancel(ctx)
		if got := engine.ClientOf(detached); got != a {
			t.Fatalf("%s: ClientOf a detached copy %v, want %v", name, got, a)
		}
		for _, c := range []context.Context{ctx, detached} {
			if got := engine.TraceFrom(c); got == nil || *got != tr {
				t.Fatalf("%s: TraceFrom %v, want %v", name, got, tr)
			}
		}
	}
	if got := engine.ClientOf(context.Background()); got.IsValid() {
		t.Fatalf("ClientOf without a client %v", got)
	}
	var none engine.QuestionContext
	if ctx := none.Set(context.Background(), netip.Addr{}, nil); engine.ClientOf(ctx).IsValid() || engine.TraceFrom(ctx) != nil {
		t.Fatal("a QuestionContext set with neither names a client or carries a trace")
	}
}

// TestQuestionContextSetInPlace: a front end's QuestionContext is filled
// with no allocation, takes the trace's value (the caller's Trace may
// change after Set), is set again for the next question, and stays a
// CancelWatcher's wrapper (the engine closes a socket on the client's
// cancel through it).
func TestQuestionContextSetInPlace(t *testing.T) {
	a, b := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	var cancel engine.CancelContext
	var qc engine.QuestionContext
	tr := engine.Trace{ID: [16]byte{1}}
	if n := testing.AllocsPerRun(100, func() { qc.Set(&cancel, a, &tr) }); n != 0 {
		t.Fatalf("Set: %v allocations, want 0", n)
	}
	ctx := qc.Set(&cancel, a, &tr)
	tr.ID[0] = 9
	if got := engine.TraceFrom(ctx); got == nil || got.ID[0] != 1 {
		t.Fatalf("TraceFrom %v: Set did not take the trace's value", got)
	}
	ctx = qc.Set(&cancel, b, nil)
	if engine.ClientOf(ctx) != b || engine.TraceFrom(ctx) != nil {
		t.Fatalf("set again: client %v trace %v, want %v and none", engine.ClientOf(ctx), engine.TraceFrom(ctx), b)
	}
	if ctx.Done() != cancel.Done() {
		t.Fatal("the QuestionContext's Done is not its parent's")
	}
}
