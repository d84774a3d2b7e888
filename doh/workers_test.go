//go:build !wasip1

package doh

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/enginetest"
	"github.com/miekg/dns"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// gatedResolver answers after gate closes; waiting counts the questions
// held at the gate.
type gatedResolver struct {
	recordingResolver
	gate    chan struct{}
	waiting atomic.Int64
}

func (r *gatedResolver) ResolveMsg(ctx context.Context, q *dns.Msg) enginetest.Response {
	r.waiting.Add(1)
	<-r.gate
	return r.recordingResolver.ResolveMsg(ctx, q)
}

func (r *gatedResolver) Resolve(ctx context.Context, query, dst []byte) engine.Response {
	return enginetest.ResolveByMsg(r, ctx, query, dst)
}

// recordConn is a connection that reads from a pipe the test writes and
// keeps what the server writes, counting its writes.
type recordConn struct {
	memConn
	mu     sync.Mutex
	out    bytes.Buffer
	writes int
}

func (c *recordConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes++

	return c.out.Write(b)
}

// ended counts the streams the server has ended in what it wrote, and the
// writes so far.
func (c *recordConn) ended(t *testing.T) (streams, writes int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fr := http2.NewFramer(nil, bytes.NewReader(c.out.Bytes()))
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return streams, c.writes
		}
		if f.Header().Flags.Has(http2.FlagDataEndStream) && f.Header().Type == http2.FrameData {
			streams++
		}
	}
}

// servePipe runs an HTTP/2 connection of srv over a recordConn whose
// client side is the returned writer.
func servePipe(t *testing.T, srv *Server) (*recordConn, *io.PipeWriter) {
	pr, pw := io.Pipe()
	rc := &recordConn{memConn: memConn{r: pr}}
	c := newH2Conn(srv, rc, bufio.NewReaderSize(rc, readBufferSize))
	done := make(chan struct{})
	go func() { c.serve(); close(done) }()
	t.Cleanup(func() { pw.Close(); <-done })
	return rc, pw
}

// TestAnswersFromTheNetworkLeaveTogether: ten questions that went to the
// network and whose answers come back at the same moment are written in
// a few writes, not one each: a worker lets the others append theirs
// before it writes. One P, so that the scheduler runs the ready workers
// in a known order; with more, those on other Ps may miss a write and
// take the next (scripts/bench-doh.sh measured 0.2 writes per answer on
// two cores, from 1.0).
func TestAnswersFromTheNetworkLeaveTogether(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	_, target := benchHandler(t)
	res := &gatedResolver{gate: make(chan struct{})}
	srv, err := newServer(NewHandler(res, Options{}), nil, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	rc, pw := servePipe(t, srv)
	go pw.Write(clientFrames(t, target, 10))
	waitFor(t, "ten questions at the resolver", func() bool { return res.waiting.Load() == 10 })
	_, before := rc.ended(t)
	close(res.gate)
	waitFor(t, "ten answers", func() bool { n, _ := rc.ended(t); return n == 10 })
	_, after := rc.ended(t)
	if w := after - before; w > 3 {
		t.Errorf("ten answers ready together took %d writes, want at most 3", w)
	}
}

// TestWorkersKeptBetweenQuestions: the goroutines that resolved one round
// of questions resolve the next (no new goroutine per question), and end
// when the server closes.
func TestWorkersKeptBetweenQuestions(t *testing.T) {
	_, target := benchHandler(t)
	res := &gatedResolver{gate: make(chan struct{})}
	close(res.gate)
	srv, err := newServer(NewHandler(res, Options{}), nil, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	rc, pw := servePipe(t, srv)
	// The preface and settings, then the requests one at a time: each
	// answered before the next is sent.
	fr := http2.NewFramer(pw, nil)
	var blk bytes.Buffer
	enc := hpack.NewEncoder(&blk)
	pw.Write([]byte(http2.ClientPreface))
	fr.WriteSettings()
	for i := range 40 {
		blk.Reset()
		for _, f := range []hpack.HeaderField{
			{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "https"},
			{Name: ":authority", Value: "dns.example"}, {Name: ":path", Value: target},
		} {
			enc.WriteField(f)
		}
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: blk.Bytes(), EndStream: true, EndHeaders: true})
		waitFor(t, "an answer", func() bool { n, _ := rc.ended(t); return n == i+1 })
		waitFor(t, "the worker idle", func() bool { return srv.workers.Idle() >= 1 })
	}
	if n := srv.workers.Started(); n > 2 {
		t.Errorf("%d workers started for 40 questions asked one after the other, want 1 (2 at most)", n)
	}
	srv.Close()
	waitFor(t, "idle workers to end", func() bool { return srv.workers.Idle() == 0 })
}

// cancelCounter is a blockingResolver that counts the questions that saw
// their context end.
type cancelCounter struct {
	blockingResolver
	cancelled atomic.Int64
}

func (r *cancelCounter) ResolveMsg(ctx context.Context, q *dns.Msg) enginetest.Response {
	resp := r.blockingResolver.ResolveMsg(ctx, q)
	if ctx.Err() != nil {
		r.cancelled.Add(1)
	}
	return resp
}

func (r *cancelCounter) Resolve(ctx context.Context, query, dst []byte) engine.Response {
	return enginetest.ResolveByMsg(r, ctx, query, dst)
}

// TestConnectionEndCancelsQuestions: a client that drops its connection
// with questions in flight has each of them cancelled (the resolver's
// context ends), not left to run to its end.
func TestConnectionEndCancelsQuestions(t *testing.T) {
	t.Parallel()
	res := &cancelCounter{blockingResolver: blockingResolver{release: make(chan struct{})}}
	defer close(res.release)
	addr, _ := startPlainLimits(t, NewHandler(res, Options{}), Limits{})
	c := dialRaw(t, addr)
	for i := range 5 {
		c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: c.block(getPath(t, "c.example.")),
			EndStream: true, EndHeaders: true})
	}
	c.flush()
	waitFor(t, "five questions at the resolver", func() bool { return res.calls.Load() == 5 })
	c.nc.Close()
	waitFor(t, "five questions cancelled", func() bool { return res.cancelled.Load() == 5 })
}

// TestHTTP2ExchangeTimes: over the HTTP/2 server, whose clock is read
// once per read batch, an exchange starts when its request was read and
// lasts until its answer, both within the time the client waited.
func TestHTTP2ExchangeTimes(t *testing.T) {
	t.Parallel()
	var ex exchanges
	base, c := startTLS(t, NewHandler(&recordingResolver{}, Options{Observe: ex.observe}), Limits{})
	for range 3 {
		before := time.Now()
		r, _ := do(t, c, newRequest(t, "GET", base+getPath(t, "times.example."), nil))
		after := time.Now()
		if r.ProtoMajor != 2 || r.StatusCode != 200 {
			t.Fatalf("%s %d", r.Proto, r.StatusCode)
		}
		var x Exchange
		waitFor(t, "the exchange observed", func() bool {
			ex.mu.Lock()
			defer ex.mu.Unlock()
			if len(ex.list) == 0 {
				return false
			}
			x, ex.list = ex.list[0], ex.list[1:]
			return true
		})
		if x.Start.Before(before) || x.Start.After(after) || x.Duration < 0 || x.Start.Add(x.Duration).After(after) {
			t.Errorf("exchange from %v for %v, outside the request's %v to %v", x.Start, x.Duration, before, after)
		}
	}
}
