//go:build !wasip1

package doh

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/miekg/dns"
	"golang.org/x/net/http2"
)

// dialRawWith opens an h2c connection and sends the preface, settings
// and what write adds, all in one write: the server reads them in one
// batch.
func dialRawWith(t testing.TB, addr string, write func(c *rawClient)) *rawClient {
	t.Helper()
	c := openRaw(t, addr)
	write(c)
	if err := c.flush(); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestWaitingStreamsKeepTheConnection: streams that wait on the resolver
// longer than every timeout of the connection (header, read, write and
// idle) are all answered, and the connection stays open. Only a client
// that stalls a header block, a body or flow control loses it. Every
// request comes whole with the preface in one write, so no read batch
// ends with a request half read: the deadline the preface was read under
// (the header timeout) must be lifted all the same.
func TestWaitingStreamsKeepTheConnection(t *testing.T) {
	t.Parallel()
	const n, timeout = 20, 200 * time.Millisecond
	res := &blockingResolver{release: make(chan struct{})}
	addr, _ := startPlainLimits(t, NewHandler(res, Options{}),
		Limits{ReadHeaderTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout, IdleTimeout: timeout})
	c := dialRawWith(t, addr, func(c *rawClient) {
		for i := range n {
			c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1),
				BlockFragment: c.block(getPath(t, fmt.Sprintf("w%d.example.", i))), EndStream: true, EndHeaders: true})
		}
	})
	waitFor(t, "the questions to reach the resolver", func() bool { return res.calls.Load() == n })
	time.Sleep(5 * timeout) // every timeout passes while they wait
	close(res.release)
	answered := map[uint32]bool{}
	ga, err := c.readUntil(10*time.Second, func(f http2.Frame) bool {
		if d, ok := f.(*http2.DataFrame); ok && d.StreamEnded() {
			answered[d.StreamID] = true
		}
		return len(answered) == n
	})
	if ga != nil || err != nil {
		t.Fatalf("after %d of %d answers: GOAWAY %v, %v", len(answered), n, ga, err)
	}
	// The connection is still there for the next question.
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 2*n + 1, BlockFragment: c.block(getPath(t, "next.example.")), EndStream: true, EndHeaders: true})
	c.flush()
	ga, err = c.readUntil(10*time.Second, func(f http2.Frame) bool {
		d, ok := f.(*http2.DataFrame)
		return ok && d.StreamID == 2*n+1 && d.StreamEnded()
	})
	if ga != nil || err != nil {
		t.Fatalf("the next question: GOAWAY %v, %v", ga, err)
	}
}

// stubbornResolver holds every question until release closes, whether or
// not its client went away, as a resolver does whose work cannot stop at
// once; it keeps each question's context.
type stubbornResolver struct {
	mu      sync.Mutex
	ctxs    []context.Context
	release chan struct{}
}

func (s *stubbornResolver) Resolve(ctx context.Context, query, dst []byte) engine.Response {
	s.mu.Lock()
	s.ctxs = append(s.ctxs, ctx)
	s.mu.Unlock()
	<-s.release
	return engine.Response{Wire: engine.AppendErrorReply(dst, query, dns.RcodeServerFailure), Rcode: dns.RcodeServerFailure}
}

// asked is how many questions reached it; cancelled how many of those
// have their context cancelled.
func (s *stubbornResolver) asked() (asked, cancelled int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ctx := range s.ctxs {
		if ctx.Err() != nil {
			cancelled++
		}
	}
	return len(s.ctxs), cancelled
}

// TestMadeYouReset (CVE-2025-8671): DATA on a stream the client already
// ended makes the server reset it (STREAM_CLOSED). Such a stream stops its
// question as a client's RST_STREAM does, and, closed, no longer counts
// against the stream limit; but once more reset streams are still running
// than the limit, the connection is closed (GOAWAY ENHANCE_YOUR_CALM).
// A server that counts them among the open streams refuses the client's
// next streams and never sees the flood.
func TestMadeYouReset(t *testing.T) {
	t.Parallel()
	const limit = 20
	res := &stubbornResolver{release: make(chan struct{})}
	defer close(res.release)
	addr, _ := startPlainLimits(t, NewHandler(res, Options{}), Limits{MaxConcurrentStreams: limit})
	c := dialRaw(t, addr)
	resets := make(chan uint32, 4*limit)
	goaway := make(chan *http2.GoAwayFrame, 1)
	go func() {
		ga, _ := c.readUntil(time.Minute, func(f http2.Frame) bool {
			if r, ok := f.(*http2.RSTStreamFrame); ok {
				if r.ErrCode != http2.ErrCodeStreamClosed {
					t.Errorf("stream %d reset with %v, want STREAM_CLOSED", r.StreamID, r.ErrCode)
				}
				resets <- r.StreamID
			}
			return false
		})
		goaway <- ga
	}()
	next := uint32(1)
	open := func(n int) (ids []uint32) {
		for range n {
			c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: next, BlockFragment: c.block(getPath(t, fmt.Sprintf("m%d.example.", next))),
				EndStream: true, EndHeaders: true})
			ids = append(ids, next)
			next += 2
		}
		c.flush()
		return ids
	}
	provoke := func(ids []uint32) {
		for _, id := range ids {
			c.fr.WriteData(id, false, []byte{0}) // the stream is half closed (remote): STREAM_CLOSED
		}
		c.flush()
	}

	// The limit's worth of streams, each reset by the server once its
	// question runs.
	first := open(limit)
	waitFor(t, "the first questions", func() bool { n, _ := res.asked(); return n == limit })
	provoke(first)
	for range limit {
		<-resets
	}
	if _, cancelled := res.asked(); cancelled != limit {
		t.Fatalf("%d of the %d questions of streams the server reset were cancelled", cancelled, limit)
	}
	// Closed, they leave room for as many new streams; reset too, they
	// are more than the limit still running.
	second := open(limit)
	waitFor(t, "the second questions", func() bool { n, _ := res.asked(); return n == 2*limit })
	provoke(second[:1])
	select {
	case ga := <-goaway:
		if ga == nil || ga.ErrCode != http2.ErrCodeEnhanceYourCalm {
			t.Fatalf("the connection ended with GOAWAY %v, want ENHANCE_YOUR_CALM", ga)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the connection stays open with more reset streams running than its stream limit")
	}
	if asked, _ := res.asked(); asked != 2*limit {
		t.Errorf("%d questions reached the resolver, want %d", asked, 2*limit)
	}
}
