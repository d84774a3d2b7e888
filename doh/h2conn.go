//go:build !wasip1

package doh

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/wiretap"
	"golang.org/x/net/http2"
)

// The HTTP/2 server of this package serves DoH and nothing else, so it can
// be simple where a general server cannot:
//
//   - One goroutine per connection reads frames and does all the work a
//     request needs that does not wait on the network: decoding headers,
//     checking the query, and answering it when the resolver can at once
//     (cache, local names). Only a question that must go upstream goes to
//     a goroutine of its own (a kept worker, see workers), and only at the
//     end of the read batch, so a RST_STREAM that came with it stops it
//     before it reaches the engine. There the resolver may begin each
//     (MissStarter: the engine sends the first upstream query), so a
//     batch's queries leave back to back before any worker runs. On
//     Linux the engine's upstream loop then owns the question: its
//     answer is finished on the loop (stream.ResolveHere) and the
//     connection flushed by a worker once per loop round (Flush); any
//     other end goes to a worker (ResolveElsewhere).
//   - Frames go to one write buffer per connection; whoever finds no write
//     in progress writes everything buffered in one Write (group commit).
//     A worker with an answer first lets the other ready goroutines run
//     (flushAfterOthers), so answers that came back together leave
//     together, in as few TLS records as fit.
//   - A request is a [stream] from a pool; its buffers and header list
//     are reused.

const (
	// connWindow is the connection's receive window: enough for many
	// POST bodies at once.
	connWindow = 1 << 20
	// maxPendingWrite bounds what waits in a connection's write buffer:
	// the reader stops reading (and the client sending) until the socket
	// takes it. It bounds PING and SETTINGS floods from clients that do
	// not read.
	maxPendingWrite = 256 << 10
	// readBufferSize is each connection's read buffer.
	readBufferSize = 8 << 10
	// maxWindow is the largest flow-control window (RFC 9113 6.9.1).
	maxWindow = 1<<31 - 1
)

// maxHeaderList is the header list size announced and enforced: the
// header bytes and HPACK's 32 bytes per field for ten fields, as net/http
// announced (its count is in HPACK's unit).
func maxHeaderList(l Limits) int { return l.MaxHeaderBytes + 10*32 }

// h2conn is one HTTP/2 connection.
type h2conn struct {
	srv    *Server
	h      *Handler
	nc     net.Conn
	br     *bufio.Reader
	fr     *http2.Framer
	peer   netip.AddrPort
	local  netip.AddrPort // the listener's side, read only for the wiretap
	limits Limits
	ctx    context.Context // ends when the connection does
	cancel context.CancelFunc

	// The reader's own state.
	payload   []byte // the HEADERS frame being read (readFrame)
	dec       *reqDecoder
	host      string  // the last literal :authority, kept for the next request
	hdr       *stream // the stream whose header block is being read
	hdrStart  time.Time
	hdrBytes  int
	sawFirst  bool // the client's first SETTINGS
	pending   []*stream
	recvWin   int32 // connection receive window left
	unacked   int32 // received and not yet given back
	rdeadline time.Time
	now       time.Time     // when this read batch started: the reader's clock
	stale     bool          // now is from an earlier batch
	slack     time.Duration // how far a deadline may move before its timer is reset
	maxList   int           // SETTINGS_MAX_HEADER_LIST_SIZE
	idleSince time.Time

	mu        sync.Mutex // guards the rest
	streams   map[uint32]*stream
	active    int // streams not yet freed, reset ones still resolving included
	resolving int // streams a worker is resolving (running)
	// resetRunning are the streams reset (by either side) whose question
	// still runs: closed for the client, they do not count against its
	// stream limit; more of them than the limit end the connection.
	resetRunning int
	maxID        uint32 // highest client stream ID seen
	wbuf, spare  []byte
	writing      bool
	flushQueued  bool // a worker is to write what the upstream loop appended (Flush)
	werr         error
	wdone        *sync.Cond
	wdeadline    time.Time
	enc          *respEncoder
	block        []byte // the header block being written
	sendWin      int64  // connection send window
	peerWin      int64  // the client's SETTINGS_INITIAL_WINDOW_SIZE
	peerFrame    int    // the client's SETTINGS_MAX_FRAME_SIZE
	blocked      []*stream
	goingAway    bool // a GOAWAY was sent or received: no new streams
	sentGoAway   bool
	closed       bool
}

// stream is one request on a connection.
type stream struct {
	call
	id        uint32
	conn      *h2conn
	ctx       engine.CancelContext // the question's, cancelled when the stream ends
	recvWin   int32
	sendWin   int64
	unsent    []byte // response body waiting for flow-control window
	hdrSize   int    // decoded header list size (RFC 9113 6.5.2)
	clen      int64  // content-length, -1 if none
	bodyLen   int
	opened    time.Time
	bad       string // why the request is malformed, "" if it is not
	pseudo    uint8  // pseudo-headers seen
	regular   bool   // a regular header field seen
	trailers  bool   // reading a trailer block
	refused   bool
	tooBig    bool
	recvDone  bool      // END_STREAM received
	begun     bool      // handed to the core
	reset     bool      // the client reset it, or the connection ended
	running   bool      // a goroutine is resolving it
	queued    bool      // in h2conn.blocked
	blockedAt time.Time // when it last waited for flow-control window
	waiting   bool      // in h2conn.pending
}

const (
	pseudoMethod = 1 << iota
	pseudoScheme
	pseudoPath
	pseudoAuthority
)

var streams = sync.Pool{New: func() any {
	return &stream{call: call{in: make([]byte, 0, pooledBufferSize), out: make([]byte, 0, pooledBufferSize)}}
}}

func newH2Conn(s *Server, nc net.Conn, br *bufio.Reader) *h2conn {
	c := &h2conn{
		srv: s, h: s.core, nc: nc, br: br, limits: s.limits,
		streams:   make(map[uint32]*stream),
		recvWin:   connWindow,
		sendWin:   65535,
		peerWin:   65535,
		peerFrame: 16384,
		wbuf:      make([]byte, 0, 4096),
	}
	if ap, err := netip.ParseAddrPort(nc.RemoteAddr().String()); err == nil {
		c.peer = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	if c.h != nil && c.h.tap != nil {
		c.local = wiretap.AddrPort(nc.LocalAddr())
	}
	l := c.limits
	c.maxList = maxHeaderList(l)
	c.slack = min(time.Second, l.ReadHeaderTimeout/10, l.ReadTimeout/10, l.WriteTimeout/10, l.IdleTimeout/10)
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.wdone = sync.NewCond(&c.mu)
	c.fr = http2.NewFramer(io.Discard, br)
	c.fr.SetMaxReadFrameSize(c.limits.MaxReadFrameSize)
	c.fr.SetReuseFrames()
	c.dec = newReqDecoder(4096, 2*c.limits.MaxHeaderBytes, c.onField)
	c.enc = newRespEncoder()
	return c
}

// serve runs the connection until it ends.
func (c *h2conn) serve() {
	defer c.close()
	c.mu.Lock()
	c.wbuf = appendSettings(c.wbuf,
		http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: c.limits.MaxConcurrentStreams},
		http2.Setting{ID: http2.SettingMaxFrameSize, Val: c.limits.MaxReadFrameSize},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: uint32(c.maxList)},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: maxUploadPerStream},
	)
	c.wbuf = appendWindowUpdate(c.wbuf, 0, connWindow-65535)
	c.flushLocked()
	c.mu.Unlock()

	c.setReadDeadline(time.Now().Add(c.limits.ReadHeaderTimeout))
	var preface [len(http2.ClientPreface)]byte
	if _, err := io.ReadFull(c.br, preface[:]); err != nil || string(preface[:]) != http2.ClientPreface {
		c.fail(http2.ConnectionError(http2.ErrCodeProtocol))
		return
	}
	c.idleSince = time.Now()
	c.stale = true
	for {
		var hf headersFrame
		f, err := c.readFrame(&hf)
		if c.stale {
			c.now, c.stale = time.Now(), false
		}
		c.mu.Lock()
		switch {
		case err != nil:
		case f == nil:
			err = c.onHeaders(&hf)
		default:
			err = c.process(f)
		}
		if err != nil {
			// Only here: errors.As makes se escape, an allocation a
			// frame were it declared for every one.
			var se http2.StreamError
			if errors.As(err, &se) {
				c.resetStream(se.StreamID, se.Code)
				err = nil
			}
		}
		if err == nil && c.resetRunning > int(c.limits.MaxConcurrentStreams) {
			// More streams reset than may be open, their questions not
			// stopped yet: the client resets faster than the work
			// stops, by RST_STREAM (CVE-2023-44487) or by frames that
			// make this server reset (MadeYouReset, CVE-2025-8671).
			err = http2.ConnectionError(http2.ErrCodeEnhanceYourCalm)
		}
		if err != nil {
			graceful := c.failLocked(err)
			c.mu.Unlock()
			if graceful {
				c.linger()
			}
			return
		}
		if !c.moreBuffered() {
			c.endBatch()
		} else if len(c.wbuf) > maxPendingWrite {
			c.flushLocked()
		}
		done := c.closed || c.goingAway && c.active == 0 && c.hdr == nil
		c.mu.Unlock()
		if done {
			c.linger()
			return
		}
	}
}

// linger ends a connection gracefully: after what was written (a GOAWAY
// last) the write side is closed, and what the client still sends is read
// and dropped for at most a second, so that closing does not reset the
// connection under the client before it read the last responses.
func (c *h2conn) linger() {
	c.mu.Lock()
	// Responses the upstream loop appended may still wait for their
	// Flush's worker: they go out before the write side closes.
	c.flushLocked()
	for c.writing {
		c.wdone.Wait()
	}
	gone := c.closed || c.werr != nil
	c.mu.Unlock()
	if gone {
		return
	}
	if cw, ok := c.nc.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	c.nc.SetReadDeadline(time.Now().Add(time.Second))
	io.Copy(io.Discard, c.br)
}

// afterAsync runs after a goroutine answered a stream, while the reader
// may be blocked: a draining connection with nothing left to answer wakes
// it, so that it ends; the read deadline follows what is left to wait for
// (the idle timeout once no stream is left, flow control).
func (c *h2conn) afterAsync() {
	switch {
	case c.closed:
	case c.goingAway && c.active == 0:
		c.setReadDeadline(time.Now())
	case c.active == 0 || len(c.blocked) > 0:
		c.armDeadline()
	}
}

// moreBuffered reports whether a whole frame waits in the read buffer: if
// not, the next read may block, so what is ready must go out first.
func (c *h2conn) moreBuffered() bool {
	n := c.br.Buffered()
	if n < frameHeaderLen {
		return false
	}
	h, _ := c.br.Peek(frameHeaderLen)
	return n >= frameHeaderLen+(int(h[0])<<16|int(h[1])<<8|int(h[2]))
}

// endBatch runs before the reader may block: questions that need the
// network start, everything written goes out, and the read deadline is
// set for what the connection is waiting for.
func (c *h2conn) endBatch() {
	// The questions' upstream queries go out back to back (startMiss),
	// then the questions the engine's upstream loop did not take go to
	// workers.
	for i, st := range c.pending {
		if st.reset {
			c.pending[i] = nil
			st.waiting = false
			c.finish(st)
			continue
		}
		st.waiting, st.running = false, true
		c.resolving++
		if c.h.startMiss(&st.ctx, &st.call, st) {
			// The upstream loop resolves it when its transaction ends.
			c.pending[i] = nil
			continue
		}
		st.waiting, st.running = true, false
		c.resolving--
	}
	for i, st := range c.pending {
		if st == nil {
			continue
		}
		c.pending[i] = nil
		st.waiting = false
		// Not a child of c.ctx: close cancels every stream it abandons.
		st.running = true
		c.resolving++
		c.srv.workers.Run(job{c, &st.ctx, st})
	}
	c.pending = c.pending[:0]
	c.stale = true
	c.flushLocked()
	for len(c.wbuf) > maxPendingWrite && c.writing && c.werr == nil {
		c.wdone.Wait()
	}
	if c.goingAway && c.active == 0 {
		return // the reader ends the connection
	}
	c.armDeadline()
}

// armDeadline sets the read deadline for what the connection waits for:
// the end of a header block, of request bodies, of responses blocked on
// flow control, or the next request.
func (c *h2conn) armDeadline() {
	var d time.Time
	switch {
	case c.hdr != nil:
		d = c.hdrStart.Add(c.limits.ReadHeaderTimeout)
	case c.active == 0:
		if c.idleSince.IsZero() {
			c.idleSince = time.Now()
		}
		d = c.idleSince.Add(c.limits.IdleTimeout)
	default:
		c.idleSince = time.Time{}
		for _, st := range c.streams {
			if !st.recvDone && (d.IsZero() || st.opened.Before(d)) {
				d = st.opened
			}
		}
		if !d.IsZero() {
			d = d.Add(c.limits.ReadTimeout)
		}
		// A client that keeps a response waiting on flow control longer
		// than the write timeout loses the connection, as one that does
		// not read does.
		for _, st := range c.blocked {
			if w := st.blockedAt.Add(c.limits.WriteTimeout); d.IsZero() || w.Before(d) {
				d = w
			}
		}
	}
	// A timer is reset only when the deadline moves earlier, or later by
	// more than the slack.
	if d.IsZero() != c.rdeadline.IsZero() || d.Sub(c.rdeadline) >= c.slack || d.Before(c.rdeadline) {
		c.setReadDeadline(d)
	}
}

// setReadDeadline sets the connection's read deadline and remembers it:
// armDeadline moves it from there. A deadline set on the socket and not
// in rdeadline would stay in force unseen: the preface's header timeout
// would end a connection whose streams all wait on the resolver, and
// whose client has nothing more to send.
func (c *h2conn) setReadDeadline(d time.Time) {
	c.rdeadline = d
	c.nc.SetReadDeadline(d)
}

// process handles one frame; c.mu is held.
func (c *h2conn) process(f http2.Frame) error {
	if !c.sawFirst {
		sf, ok := f.(*http2.SettingsFrame)
		if !ok || sf.IsAck() {
			return http2.ConnectionError(http2.ErrCodeProtocol)
		}
		c.sawFirst = true
	}
	switch f := f.(type) {
	case *http2.ContinuationFrame:
		return c.onBlock(f.HeaderBlockFragment(), f.HeadersEnded(), false)
	case *http2.DataFrame:
		return c.onData(f)
	case *http2.RSTStreamFrame:
		return c.onReset(f)
	case *http2.SettingsFrame:
		return c.onSettings(f)
	case *http2.WindowUpdateFrame:
		return c.onWindowUpdate(f)
	case *http2.PingFrame:
		if !f.IsAck() {
			c.wbuf = appendPingAck(c.wbuf, f.Data)
		}
	case *http2.PriorityFrame:
		if f.StreamDep == f.StreamID {
			return http2.StreamError{StreamID: f.StreamID, Code: http2.ErrCodeProtocol}
		}
	case *http2.GoAwayFrame:
		c.goingAway = true
	case *http2.PushPromiseFrame:
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	return nil
}

func (c *h2conn) idle(id uint32) bool { return id > c.maxID }

func (c *h2conn) onData(f *http2.DataFrame) error {
	id, n := f.StreamID, int32(f.Length)
	if c.idle(id) {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	if n > c.recvWin {
		return http2.ConnectionError(http2.ErrCodeFlowControl)
	}
	c.recvWin -= n
	c.unacked += n
	if c.unacked >= connWindow/4 {
		c.wbuf = appendWindowUpdate(c.wbuf, 0, uint32(c.unacked))
		c.recvWin += c.unacked
		c.unacked = 0
	}
	st := c.streams[id]
	if st == nil || st.recvDone {
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeStreamClosed}
	}
	if n > st.recvWin {
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeFlowControl}
	}
	st.recvWin -= n
	data := f.Data()
	st.bodyLen += len(data)
	if st.clen >= 0 && int64(st.bodyLen) > st.clen {
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
	}
	if st.begun { // answered early (413): the rest is not read
		if f.StreamEnded() {
			st.recvDone = true
		}
		return nil
	}
	if room := MaxMessageSize + 1 - len(st.req.Body); room > 0 {
		st.req.Body = append(st.req.Body, data[:min(len(data), room)]...)
	}
	if f.StreamEnded() {
		if st.clen >= 0 && int64(st.bodyLen) != st.clen {
			return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
		}
		st.recvDone = true
		return c.endRequest(st)
	}
	if len(st.req.Body) > MaxMessageSize {
		return c.start(st) // 413 at once
	}
	return nil
}

func (c *h2conn) endRequest(st *stream) error {
	st.recvDone = true
	if st.begun {
		return nil
	}
	return c.start(st)
}

// start hands a complete request to the core: answered here when it can
// be, else queued to resolve once this read batch is done.
func (c *h2conn) start(st *stream) error {
	st.begun = true
	c.srv.active.Add(1)
	st.received = c.now
	if c.h.begin(&st.call) || c.h.answer(c.ctx, &st.call, false) {
		return c.respond(st, c.now)
	}
	st.waiting = true
	c.pending = append(c.pending, st)
	return nil
}

// resolve asks the resolver for a question that must wait on the network,
// on a goroutine of its own.
func (c *h2conn) resolve(ctx context.Context, st *stream) { c.resolveOn(ctx, st, false) }

// ResolveHere implements engine.MissContinuation: the stream's question
// finished on the upstream loop, its response flushed with the loop's
// round.
func (st *stream) ResolveHere() engine.Flusher {
	c := st.conn
	c.resolveOn(&st.ctx, st, true)
	return c
}

// ResolveElsewhere implements engine.MissContinuation: a worker goes on.
func (st *stream) ResolveElsewhere() {
	c := st.conn
	c.srv.workers.Run(job{c, &st.ctx, st})
}

// Flush implements engine.Flusher: what the loop's round appended leaves,
// written by a worker (a write may wait for a client that does not read;
// the loop serves every connection). A write already under way takes it
// along.
func (c *h2conn) Flush() {
	c.mu.Lock()
	if c.writing || c.flushQueued || c.werr != nil || len(c.wbuf) == 0 {
		c.mu.Unlock()
		return
	}
	c.flushQueued = true
	c.mu.Unlock()
	c.srv.workers.Run(job{c: c})
}

// flushAppended writes what the loop's questions appended (Flush).
func (c *h2conn) flushAppended() {
	c.mu.Lock()
	c.flushQueued = false
	c.flushLocked()
	c.mu.Unlock()
}

// resolveOn resolves st; inLoop leaves the flush to the upstream loop.
func (c *h2conn) resolveOn(ctx context.Context, st *stream, inLoop bool) {
	// A question the resolver began is ended by it, its client gone or not.
	ok := (ctx.Err() == nil || st.mustAnswer()) && c.h.answer(ctx, &st.call, true)
	c.mu.Lock()
	defer c.mu.Unlock()
	st.running = false
	c.resolving--
	if st.reset {
		c.resetRunning--
	}
	if !ok || st.reset {
		st.cancelled()
		c.finish(st)
		c.afterAsync()
		return
	}
	now := st.x.Response.Answered // the resolver's last clock reading, if it gave one
	if now.IsZero() {
		now = time.Now()
	}
	c.respond(st, now) // st may be freed from here on
	if !inLoop {
		c.flushAfterOthers()
	}
	c.afterAsync()
}

// finish ends a stream's life: observed if it reached the core, then
// freed unless a goroutine still holds it.
func (c *h2conn) finish(st *stream) {
	if st.begun {
		st.begun = false
		c.h.finish(&st.call)
		c.srv.active.Add(-1)
	}
	if c.streams[st.id] == st {
		delete(c.streams, st.id)
	}
	if !st.running && !st.queued && !st.waiting {
		c.free(st)
	}
}

// free returns a stream to the pool.
func (c *h2conn) free(st *stream) {
	if !st.refused {
		c.active--
	}
	st.call.reset()
	in, out, hdr, body, rh := st.in, st.out, st.req.Header, st.req.Body, st.resp.Header
	*st = stream{}
	st.in, st.out, st.req.Header, st.req.Body, st.resp.Header = in, out, hdr, body, rh
	if cap(in) <= pooledBufferSize*4 && cap(out) <= pooledBufferSize*4 && cap(body) <= pooledBufferSize*4 {
		streams.Put(st)
	}
}

func (c *h2conn) onReset(f *http2.RSTStreamFrame) error {
	if c.idle(f.StreamID) {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	if st := c.streams[f.StreamID]; st != nil {
		c.abandon(st)
	}
	return nil
}

// abandon ends a stream nobody will read: a question in flight is
// cancelled, one not yet started never starts.
func (c *h2conn) abandon(st *stream) {
	st.reset = true
	delete(c.streams, st.id)
	st.ctx.Cancel()
	if st.running {
		c.resetRunning++
	}
	if st.running || st.waiting {
		return // resolve or endBatch finishes it
	}
	if st.queued {
		st.queued = false
		for i, b := range c.blocked {
			if b == st {
				c.blocked = append(c.blocked[:i], c.blocked[i+1:]...)
				break
			}
		}
	}
	st.cancelled()
	c.finish(st)
}

// resetStream answers a stream error with RST_STREAM.
func (c *h2conn) resetStream(id uint32, code http2.ErrCode) {
	c.wbuf = appendRSTStream(c.wbuf, id, code)
	if st := c.streams[id]; st != nil {
		c.abandon(st)
	}
}

// fail ends the connection for a connection error, with a GOAWAY.
func (c *h2conn) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failLocked(err)
}

// failLocked ends the connection for err: a GOAWAY saying why, unless
// one was sent. It reports whether the end is graceful (idle, drained):
// then the connection lingers; a client that broke the protocol is cut at
// once.
func (c *h2conn) failLocked(err error) (graceful bool) {
	var code http2.ErrCode = http2.ErrCodeProtocol
	var ce http2.ConnectionError
	switch {
	case errors.As(err, &ce):
		code = http2.ErrCode(ce)
	case errors.Is(err, http2.ErrFrameTooLarge):
		code = http2.ErrCodeFrameSize
	case errors.Is(err, os.ErrDeadlineExceeded):
		code = http2.ErrCodeNo
		if c.hdr != nil {
			code = http2.ErrCodeProtocol
		}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		c.closeLocked()
		return false
	}
	if !c.closed && c.werr == nil && !c.sentGoAway {
		c.wbuf = appendGoAway(c.wbuf, c.maxID, code, "")
		c.goingAway, c.sentGoAway = true, true
		c.flushLocked()
	}
	return code == http2.ErrCodeNo
}

// drain sends a GOAWAY: streams open are answered, no new one starts,
// and the connection closes when the last is done.
func (c *h2conn) drain() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.sentGoAway {
		return
	}
	c.goingAway, c.sentGoAway = true, true
	c.wbuf = appendGoAway(c.wbuf, c.maxID, http2.ErrCodeNo, "")
	c.flushLocked()
	c.afterAsync()
}

func (c *h2conn) closeLocked() {
	if c.closed {
		return
	}
	c.closed = true
	c.cancel()
	c.nc.Close()
}

// close ends the connection for good: every stream is abandoned.
func (c *h2conn) close() {
	c.mu.Lock()
	c.closeLocked()
	for _, st := range c.streams {
		c.abandon(st)
	}
	pending := c.pending
	c.pending = nil
	for _, st := range pending {
		st.waiting, st.reset = false, true
		st.cancelled()
		c.finish(st)
	}
	c.mu.Unlock()
	c.srv.forget(c)
}
