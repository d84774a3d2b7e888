//go:build !wasip1

package doh

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/quicvarint"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/wiretap"
)

// The HTTP/3 server of this package answers DoH on quic-go's streams
// directly, as the HTTP/2 server answers on its connection (doc.go):
// quic-go's http3.Server gave every request a goroutine started fresh
// (its stack grown by copying), an http.Request with header maps, a
// response writer, a context and stream bookkeeping, which was more than
// half of an HTTP/3 cache hit's CPU (profiled under scripts/h3load: see
// H3Server). Here:
//
//   - Each connection has one goroutine that accepts request streams and
//     hands each to a kept goroutine of the server's workpool (grown
//     already), which reads the request (h3frames.go), goes through the
//     same core as every other transport (begin, answer, finish), and
//     writes HEADERS and DATA in one Write before it closes the stream.
//   - The stream's state (the call, its buffers, the reader, the QPACK
//     encoder) comes from a pool and goes back to it.
//   - The control stream carries SETTINGS (no QPACK dynamic table: the
//     client's field sections stand alone) and, at shutdown, GOAWAY; the
//     client's control and QPACK streams are read as RFC 9114 section 6.2
//     asks.

// h3conn is one HTTP/3 connection.
type h3conn struct {
	srv     *H3Server
	h       *Handler
	qc      *quic.Conn
	peer    netip.AddrPort
	local   netip.AddrPort // for the wiretap only
	maxList int

	streams sync.WaitGroup // request streams being served

	mu          sync.Mutex // guards what follows
	open        int        // request streams being served
	idle        *time.Timer
	ctrl        *quic.SendStream
	sawControl  bool // the client's control stream
	sawEncoder  bool
	sawDecoder  bool
	draining    bool
	nextRequest quic.StreamID // the lowest request stream not yet accepted
}

// h3job is one request stream for a kept goroutine.
type h3job struct {
	c  *h3conn
	st *h3stream
}

func runH3Job(j h3job) {
	j.c.advance(j.st, false)
	j.c.endStream(j.st)
}

// h3Next is where a request stream goes on after advance.
type h3Next uint8

const (
	h3Done   h3Next = iota // it ended
	h3Worker               // a worker goes on
	h3Loop                 // the engine's upstream loop has its question (StartMiss)
)

// ResolveHere implements engine.MissContinuation: the question finished
// on the upstream loop, its response written there when it is small
// (quic-go copies it; nothing waits).
func (st *h3stream) ResolveHere() engine.Flusher {
	st.conn.goOn(st, st.conn.advance(st, true))
	return nil
}

// ResolveElsewhere implements engine.MissContinuation: a worker goes on.
func (st *h3stream) ResolveElsewhere() { st.conn.goOn(st, h3Worker) }

// goOn takes st where advance said.
func (c *h3conn) goOn(st *h3stream, next h3Next) {
	switch next {
	case h3Done:
		c.endStream(st)
	case h3Worker:
		c.srv.pool.Run(h3job{c, st})
	}
}

// h3stream is a request stream's state, pooled.
type h3stream struct {
	call
	h3Reading
	conn  *h3conn
	str   *quic.Stream
	src   h3Source
	br    *bufio.Reader
	resp  *h3Response
	stage h3Stage
}

// h3Stage is how far a request stream got.
type h3Stage uint8

const (
	stageRead    h3Stage = iota // the request is to be read
	stageAnswer                 // checked and, if it can be, answered at once
	stageResolve                // waits on the resolver
	stageWrite                  // the response is ready
)

var h3streams = sync.Pool{New: func() any {
	st := &h3stream{
		call: call{in: make([]byte, 0, pooledBufferSize), out: make([]byte, 0, pooledBufferSize)},
		resp: newH3Response(),
	}
	st.src.buf = make([]byte, 0, h3FirstRead)
	st.br = bufio.NewReaderSize(&st.src, 2048)
	return st
}}

// h3FirstRead is how much of a request the accept loop takes: a DoH
// GET's header block with room to spare.
const h3FirstRead = 2048

// h3Source is what a request stream's reader reads: first what had
// arrived when the stream was accepted (took, without waiting), then,
// once live, the stream itself. The accept loop reads the request from
// what had arrived alone; if that is not all of it, a worker reads it
// again from the start, live.
type h3Source struct {
	buf  []byte
	pos  int
	err  error // what the stream said after buf (io.EOF: its end)
	live bool
	str  *quic.Stream
}

// errH3More: the request goes on past what had arrived.
var errH3More = errors.New("http3: more of the request to come")

// took reads what has arrived on str: one Read, which does not wait for
// data already there, and waits at most a millisecond for data that is
// not (a stream opened by a later stream's frame, before its own).
func (s *h3Source) took(str *quic.Stream, now time.Time) {
	s.str, s.live, s.pos = str, false, 0
	str.SetReadDeadline(now.Add(time.Millisecond))
	n, err := str.Read(s.buf[:cap(s.buf)])
	s.buf, s.err = s.buf[:n], err
	if err != nil && err != io.EOF {
		s.err = nil // the live reads will see it again, or the timeout was this one's
	}
}

func (s *h3Source) Read(p []byte) (int, error) {
	if s.pos < len(s.buf) {
		n := copy(p, s.buf[s.pos:])
		s.pos += n
		return n, nil
	}
	switch {
	case s.err != nil:
		return 0, s.err
	case !s.live:
		return 0, errH3More
	}
	return s.str.Read(p)
}

func newH3Conn(s *H3Server, qc *quic.Conn) *h3conn {
	c := &h3conn{srv: s, h: s.handler, qc: qc, maxList: s.maxList}
	c.peer = wiretap.AddrPort(qc.RemoteAddr())
	c.peer = netip.AddrPortFrom(c.peer.Addr().Unmap(), c.peer.Port())
	if c.h.tap != nil {
		c.local = wiretap.AddrPort(qc.LocalAddr())
	}
	if d := s.limits.IdleTimeout; d > 0 {
		c.idle = time.AfterFunc(d, func() { qc.CloseWithError(h3NoError, "idle timeout") })
	}
	return c
}

// serve runs the connection until it ends or the server closes it.
func (c *h3conn) serve() {
	defer c.stopIdle()
	ctrl, err := c.qc.OpenUniStream()
	if err != nil {
		c.qc.CloseWithError(h3InternalErrorCode, "opening the control stream")
		return
	}
	c.mu.Lock()
	c.ctrl = ctrl
	c.mu.Unlock()
	if _, err := ctrl.Write(appendH3Settings(nil, c.maxList)); err != nil {
		return
	}
	go c.acceptUni()
	ctx := c.srv.graceCtx
	for {
		str, err := c.qc.AcceptStream(ctx)
		if err != nil {
			if c.qc.Context().Err() != nil {
				break
			}
			if c.srv.closeCtx.Err() != nil {
				c.qc.CloseWithError(h3NoError, "")
				break
			}
			// Shutdown: GOAWAY, and the streams already accepted are
			// answered; what the client opens after is rejected.
			c.goAway()
			ctx = c.srv.closeCtx
			continue
		}
		c.mu.Lock()
		if c.draining {
			c.mu.Unlock()
			str.CancelRead(h3RequestRejected)
			str.CancelWrite(h3RequestRejected)
			continue
		}
		c.nextRequest = str.StreamID() + 4
		c.open++
		if c.open == 1 && c.idle != nil {
			c.idle.Stop()
		}
		c.streams.Add(1)
		c.mu.Unlock()
		c.start(str)
	}
	c.streams.Wait()
}

// h3InternalErrorCode is H3_INTERNAL_ERROR.
const h3InternalErrorCode = 0x0102

// goAway tells the client that no request stream after those accepted
// will be served, then closes the connection once they are answered.
func (c *h3conn) goAway() {
	c.mu.Lock()
	c.draining = true
	ctrl, next := c.ctrl, c.nextRequest
	c.mu.Unlock()
	go func() {
		// Writing may wait on the client's flow control; it returns once
		// the connection is closed.
		ctrl.Write(appendH3GoAway(nil, uint64(next)))
		c.streams.Wait()
		awaitDelivery(c.qc)
		c.qc.CloseWithError(h3NoError, "")
	}()
}

// awaitDelivery gives the answers just written time to reach the client
// before the connection is closed (closing drops stream data not yet
// acknowledged): a few round trips, 100 ms to 2 s, or until the client
// closes.
func awaitDelivery(qc *quic.Conn) {
	st := qc.ConnectionStats()
	grace := min(max(4*(st.SmoothedRTT+4*st.MeanDeviation), 100*time.Millisecond), 2*time.Second)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-qc.Context().Done():
	case <-t.C:
	}
}

func (c *h3conn) stopIdle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.idle != nil {
		c.idle.Stop()
		c.idle = nil
	}
}

// endStream counts a request stream done, and frees its state: the
// last one starts the idle timeout.
func (c *h3conn) endStream(st *h3stream) {
	st.free()
	c.srv.active.Add(-1)
	c.mu.Lock()
	c.open--
	if c.open == 0 && c.idle != nil {
		c.idle.Reset(c.srv.limits.IdleTimeout)
	}
	c.mu.Unlock()
	c.streams.Done()
}

// start serves a request stream just accepted: read from what arrived
// with it and answered here when the core can at once (a cache hit, an
// error), as the HTTP/2 server answers on its connection's goroutine;
// else a kept goroutine goes on (a request not all there, a question
// that must wait on the network, a long response).
func (c *h3conn) start(str *quic.Stream) {
	s := c.srv
	s.active.Add(1)
	now := time.Now()
	st := h3streams.Get().(*h3stream)
	st.conn, st.str, st.stage, st.maxList = c, str, stageRead, c.maxList
	st.src.took(str, now)
	st.br.Reset(&st.src)
	// The request must come whole within ReadTimeout and its answer
	// leave within WriteTimeout, as over HTTP/2.
	str.SetReadDeadline(now.Add(s.limits.ReadTimeout))
	str.SetWriteDeadline(now.Add(s.limits.WriteTimeout))
	st.req.Proto, st.req.Peer, st.req.Local = ProtoHTTP3, c.peer, c.local
	c.goOn(st, c.advance(st, true))
}

// h3InlineWrite is the largest response the accept loop writes itself:
// quic-go copies a write this small and returns at once.
const h3InlineWrite = 1000

// advance takes st as far as it can go: to its end, or, inline (on the
// accept loop or the upstream loop), up to where it would wait: then a
// worker goes on from there, or, for a miss the engine began
// (StartMiss: its query leaves at once, from here), the upstream loop.
func (c *h3conn) advance(st *h3stream, inline bool) h3Next {
	h, cl, str := c.h, &st.call, st.str
	for {
		switch st.stage {
		case stageRead:
			err := st.readRequest(st.br, cl)
			if err == errH3More && inline {
				return h3Worker
			}
			if err == errH3More {
				// Read it again from the start, from the stream this time.
				cl.reset()
				st.req.Proto, st.req.Peer, st.req.Local = ProtoHTTP3, c.peer, c.local
				st.src.pos, st.src.live = 0, true
				st.br.Reset(&st.src)
				continue
			}
			if err != nil {
				c.refuse(str, st, err)
				return h3Done
			}
			st.stage = stageAnswer
		case stageAnswer:
			if h.begin(cl) || h.answer(str.Context(), cl, false) {
				st.stage = stageWrite
				continue
			}
			st.stage = stageResolve
			if !inline {
				continue
			}
			if h.startMiss(str.Context(), cl, st) {
				return h3Loop
			}
			return h3Worker
		case stageResolve:
			// str's context ends when the client stops reading or the
			// connection ends. A question the resolver began is ended
			// by it, its client gone or not.
			ctx := str.Context()
			if !(ctx.Err() == nil || cl.mustAnswer()) || !h.answer(ctx, cl, true) {
				h.finish(cl) // the client went away: no one to answer
				str.CancelRead(h3RequestCancelled)
				str.CancelWrite(h3RequestCancelled)
				return h3Done
			}
			st.stage = stageWrite
		case stageWrite:
			if inline && len(cl.resp.Body) > h3InlineWrite {
				return h3Worker
			}
			c.respond(st)
			return h3Done
		}
	}
}

// respond writes st's response, HEADERS and DATA in one write, and ends
// the stream.
func (c *h3conn) respond(st *h3stream) {
	cl, str := &st.call, st.str
	body := cl.resp.Body
	if cl.req.Method == http.MethodHead { // the headers of what a GET would get (RFC 9110 section 9.3.2)
		body = nil
	}
	b := st.resp.encode(cl.resp.Status, httpDate(time.Now()), cl.resp.Header, body)
	if _, err := str.Write(b); err != nil {
		cl.cancelled()
		str.CancelWrite(h3RequestCancelled)
	} else {
		str.Close()
	}
	// What the client still sends (a GET's end, a body past the limit)
	// is not wanted; once the stream's end was read this does nothing.
	str.CancelRead(h3NoError)
	c.h.finish(cl)
}

// refuse ends a stream whose request could not be read: 431 for headers
// over the limit (as quic-go's http3 server answers), a stream error or
// a connection error for a request that breaks the rules, a reset for
// one that did not arrive.
func (c *h3conn) refuse(str *quic.Stream, st *h3stream, err error) {
	if err == errH3HeadersTooLarge {
		str.CancelRead(h3ExcessiveLoad)
		str.Write(st.resp.encode(http.StatusRequestHeaderFieldsTooLarge, httpDate(time.Now()), nil, nil))
		str.Close()
		return
	}
	code := uint64(h3RequestIncomplete)
	if he, ok := errors.AsType[*h3Error](err); ok {
		if he.conn {
			c.qc.CloseWithError(quic.ApplicationErrorCode(he.code), he.reason)
			return
		}
		code = he.code
	}
	str.CancelRead(quic.StreamErrorCode(code))
	str.CancelWrite(quic.StreamErrorCode(code))
}

// free returns a stream's state to the pool.
func (st *h3stream) free() {
	st.call.reset()
	st.conn, st.str, st.src.str, st.src.err = nil, nil, nil, nil
	st.src.buf = st.src.buf[:0]
	if cap(st.in) <= pooledBufferSize*4 && cap(st.out) <= pooledBufferSize*4 && cap(st.req.Body) <= pooledBufferSize*4 &&
		cap(st.block) <= pooledBufferSize*4 && cap(st.resp.out) <= pooledBufferSize*4 {
		h3streams.Put(st)
	}
}

// acceptUni serves the client's unidirectional streams.
func (c *h3conn) acceptUni() {
	for {
		rs, err := c.qc.AcceptUniStream(context.Background())
		if err != nil {
			return
		}
		go c.serveUni(rs)
	}
}

// serveUni reads a unidirectional stream of the client by its type (RFC
// 9114 section 6.2): the control stream, read to its end (it must not
// end); the QPACK streams, read and dropped (no dynamic table is
// allowed, so they carry nothing that matters); a push stream, which a
// client must not open; any other type is refused with
// H3_STREAM_CREATION_ERROR.
func (c *h3conn) serveUni(rs *quic.ReceiveStream) {
	br := bufio.NewReaderSize(rs, 512)
	typ, err := quicvarint.Read(br)
	if err != nil {
		rs.CancelRead(h3StreamCreationError)
		return
	}
	switch typ {
	case h3StreamControl, h3StreamQPACKEncoder, h3StreamQPACKDecoder:
		if !c.firstOf(typ) {
			c.qc.CloseWithError(h3StreamCreationError, "a second stream of type 0x"+strconv.FormatUint(typ, 16))
			return
		}
	case h3StreamPush:
		c.qc.CloseWithError(h3StreamCreationError, "a push stream from the client")
		return
	default:
		rs.CancelRead(h3StreamCreationError)
		return
	}
	if typ != h3StreamControl {
		_, err := br.WriteTo(io.Discard)
		if err == nil { // a critical stream must not end (RFC 9204 section 4.2)
			c.qc.CloseWithError(h3ClosedCriticalStream, "QPACK stream closed")
		}
		return
	}
	if e := readControl(br); e != nil {
		c.qc.CloseWithError(quic.ApplicationErrorCode(e.code), e.reason)
	}
}

// firstOf records a critical stream of typ; false if one came before.
func (c *h3conn) firstOf(typ uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := map[uint64]*bool{h3StreamControl: &c.sawControl, h3StreamQPACKEncoder: &c.sawEncoder,
		h3StreamQPACKDecoder: &c.sawDecoder}[typ]
	if *seen {
		return false
	}
	*seen = true
	return true
}

// readControl reads the client's control stream (RFC 9114 section
// 6.2.1): SETTINGS first and once, then GOAWAY, MAX_PUSH_ID, CANCEL_PUSH
// and unknown frames (PRIORITY_UPDATE among them), which change nothing
// for a server that never pushes and answers each stream as it comes.
// It returns the connection error that ends it: the stream must not end.
func readControl(r *bufio.Reader) *h3Error {
	for first := true; ; first = false {
		typ, n, err := readFrameHeader(r)
		if err != nil {
			return connError(h3ClosedCriticalStream, "control stream closed")
		}
		if first && typ != h3FrameSettings {
			return connError(h3MissingSettings, "control stream without SETTINGS first")
		}
		switch {
		case typ == h3FrameSettings && first:
			if n > 1<<14 {
				return connError(h3ExcessiveLoad, "SETTINGS too large")
			}
			b := make([]byte, n)
			if _, err := io.ReadFull(r, b); err != nil {
				return connError(h3FrameError, "SETTINGS cut short")
			}
			if e := checkSettings(b); e != nil {
				return e
			}
		case typ == h3FrameGoAway || typ == h3FrameMaxPushID || typ == h3FrameCancelPush || unknownFrame(typ):
			if n > 1<<14 && !unknownFrame(typ) {
				return connError(h3FrameError, "control frame too large")
			}
			if err := discard(r, n); err != nil {
				return connError(h3ClosedCriticalStream, "control stream closed")
			}
		default:
			return connError(h3FrameUnexpected, "frame of type 0x"+strconv.FormatUint(typ, 16)+" on the control stream")
		}
	}
}

// checkSettings checks a SETTINGS frame's payload: identifiers once
// each, none of those HTTP/2 had and HTTP/3 reserves (RFC 9114 section
// 7.2.4.1). Their values change nothing here.
func checkSettings(b []byte) *h3Error {
	seen := map[uint64]bool{}
	for len(b) > 0 {
		id, n, err := quicvarint.Parse(b)
		if err != nil {
			return connError(h3FrameError, "SETTINGS malformed")
		}
		b = b[n:]
		if _, n, err = quicvarint.Parse(b); err != nil {
			return connError(h3FrameError, "SETTINGS malformed")
		}
		b = b[n:]
		if seen[id] || id >= 0x2 && id <= 0x5 {
			return connError(h3SettingsError, "SETTINGS with a duplicate or reserved identifier")
		}
		seen[id] = true
	}
	return nil
}
