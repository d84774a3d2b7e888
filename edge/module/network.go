//go:build wasip1

package main

import (
	"net/netip"
	"sync"
	"time"
	"unsafe"

	"github.com/dohfwd/dohfwd/edge/abi"
	"github.com/dohfwd/dohfwd/engine"
)

// The socket interface the host provides (package abi). None of these
// waits: a goroutine that must wait for the network parks on its socket's
// channel, and the host's events (dohfwd_poll) wake it.

//go:wasmimport dohfwd sock_open
func sockOpen(transport uint32, addr unsafe.Pointer, addrLen uint32, src unsafe.Pointer, srcLen uint32, deadline int64, fd unsafe.Pointer) uint32

//go:wasmimport dohfwd sock_send
func sockSend(fd uint32, b unsafe.Pointer, n uint32) uint32

//go:wasmimport dohfwd sock_recv
func sockRecv(fd uint32, max uint32, deadline int64) uint32

//go:wasmimport dohfwd sock_close
func sockClose(fd uint32) uint32

// hostNetwork is the engine's Network inside the module: every socket
// lives in the host, and every wait is a goroutine parked until an event.
type hostNetwork struct{ w *waits }

// waits is the module's sockets that wait for the host, by fd.
type waits struct {
	mu    sync.Mutex
	socks map[uint32]*hostSocket
	// next is no later than the earliest deadline of a waiting socket
	// (zero: none known); expire scans only once it has passed.
	next    time.Time
	waiting int // sockets with a wait in progress
	// ready are the owned sockets (hostSocket.await) whose wait ended
	// since the poll last finished their questions.
	ready []*hostSocket
}

func newWaits() *waits { return &waits{socks: map[uint32]*hostSocket{}} }

// ReusesUDPSockets opts into the engine's UDP socket pool (engine.SocketReuser):
// a host's socket lives until sock_close, so a clean transaction's socket
// may serve the next one, under the engine's rules (at least 256 idle to
// choose from at random, 60 s of life), as natively.
func (hostNetwork) ReusesUDPSockets() bool { return true }

// ConnectsLater tells the engine that a TCP Open returns at once
// (engine.ConnectsLater): the connect goes on in the host.
func (hostNetwork) ConnectsLater() bool { return true }

// hostSocket is one engine socket; fd is the host's.
type hostSocket struct {
	w    *waits
	fd   uint32
	peer netip.AddrPort
	// stream says s is TCP: a pending end's bytes are a piece of the
	// stream, which Receive may hand out over several calls.
	stream bool
	// Under w.mu: the wait in progress (a connect or a read into buf),
	// its deadline, and whether the socket is closed.
	waiting  bool
	buf      []byte
	deadline time.Time
	closed   bool
	// connectFailed is the failure of a TCP connect that ended while
	// nothing waited on the socket: its next Send or Receive returns it.
	connectFailed uint32
	done          chan result // the end of a wait; buffered, one at a time
	// owner, when set, is the question whose wait (await) ends with no
	// goroutine parked: its end is kept in pending and the socket listed
	// in w.ready for the poll to finish the question (finishWithReplies).
	// A pending end not taken by the poll is the next Receive's.
	owner      *question
	pending    result
	hasPending bool
}

// result ends a wait: n bytes from from, or code (an engine.ErrorClass),
// the connect's failure when connect is set.
type result struct {
	n       int
	from    netip.AddrPort
	code    uint32
	connect bool
}

func (n hostNetwork) Open(t engine.Transport, server netip.AddrPort, source netip.Addr, deadline time.Time) (engine.Socket, error) {
	var addrBuf, srcBuf [64]byte
	addr := server.AppendTo(addrBuf[:0])
	var src []byte
	if source.IsValid() {
		src = source.AppendTo(srcBuf[:0])
	}
	op := "open"
	if t == engine.TCP {
		op = "connect"
	}
	var fd uint32
	if c := sockOpen(uint32(t), bytesPtr(addr), uint32(len(addr)), bytesPtr(src), uint32(len(src)), unixNanos(deadline), unsafe.Pointer(&fd)); c != 0 {
		return nil, socketError(op, c)
	}
	s := &hostSocket{w: n.w, fd: fd, peer: server, stream: t == engine.TCP, done: make(chan result, 1)}
	n.w.mu.Lock()
	n.w.socks[fd] = s
	n.w.mu.Unlock()
	// A TCP socket is handed over while its connect goes on in the host
	// (engine.Network allows it): the query is sent and its read named in
	// the same poll, which the host carries out once connected. Waiting
	// here for the connect would cost a poll more per TCP query. A failed
	// connect ends the socket's next wait as "connect".
	return s, nil
}

// wait starts a wait on s; the caller holds s.w.mu.
func (s *hostSocket) wait(b []byte, deadline time.Time) {
	s.waiting, s.buf, s.deadline = true, b, deadline
	s.w.waiting++
	if !deadline.IsZero() && (s.w.next.IsZero() || deadline.Before(s.w.next)) {
		s.w.next = deadline
	}
}

// end ends s's wait with r; the caller holds s.w.mu.
func (s *hostSocket) end(r result) {
	if !s.waiting {
		return
	}
	s.waiting = false
	s.w.waiting--
	if s.owner != nil {
		// The reply stays in s.buf, the owner's, for finishWithReplies.
		s.pending, s.hasPending = r, true
		s.w.ready = append(s.w.ready, s)
		return
	}
	s.buf = nil
	s.done <- r
}

// await starts a wait on s that no goroutine parks on: the transaction
// the engine started for qn (engine.Miss.StartedWait) waits for its reply
// into b until deadline, and the event that ends the wait (the read, the
// deadline passed, the socket closed by a cancel) lists s for the poll's
// finishWithReplies. It reports false having started nothing when s cannot
// wait (closed, its connect failed, a wait in progress).
func (s *hostSocket) await(qn *question, b []byte, deadline time.Time) bool {
	s.w.mu.Lock()
	if s.closed || s.connectFailed != 0 || s.waiting || s.hasPending {
		s.w.mu.Unlock()
		return false
	}
	s.owner = qn
	s.wait(b, deadline)
	s.w.mu.Unlock()
	if c := sockRecv(s.fd, uint32(len(b)), unixNanos(deadline)); c != 0 {
		s.w.mu.Lock()
		s.end(result{code: c})
		s.w.mu.Unlock()
	}
	return true
}

// ended is a wait of an owned socket (await) that ended: its question,
// its end and the buffer the reply was read into.
type ended struct {
	s   *hostSocket
	qn  *question
	r   result
	buf []byte
}

// takeEnded returns the owned waits that ended since the last call,
// appended to dst, each socket's owner and pending end taken: a
// question finishWithReplies cannot finish gives its end back (giveBack).
func (w *waits) takeEnded(dst []ended) []ended {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, s := range w.ready {
		dst = append(dst, ended{s: s, qn: s.owner, r: s.pending, buf: s.buf})
		s.owner, s.pending, s.hasPending, s.buf = nil, result{}, false, nil
		w.ready[i] = nil
	}
	w.ready = w.ready[:0]
	return dst
}

// giveBack makes e's end the next Receive's on its socket: the wait's
// reply, or its failure, for the engine's rules to meet as ever.
func (w *waits) giveBack(e *ended) {
	w.mu.Lock()
	e.s.pending, e.s.hasPending, e.s.buf = e.r, true, e.buf
	w.mu.Unlock()
}

// anyEnded reports whether an owned wait ended since takeEnded.
func (w *waits) anyEnded() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.ready) > 0
}

func (s *hostSocket) Send(b []byte) error {
	s.w.mu.Lock()
	failed := s.connectFailed
	s.w.mu.Unlock()
	if failed != 0 {
		return socketError("connect", failed)
	}
	if c := sockSend(s.fd, bytesPtr(b), uint32(len(b))); c != 0 {
		return socketError("send", c)
	}
	return nil
}

func (s *hostSocket) Receive(b []byte, deadline time.Time) (int, netip.AddrPort, error) {
	s.w.mu.Lock()
	if s.closed {
		s.w.mu.Unlock()
		return 0, s.peer, socketError("receive", uint32(engine.ErrClosed))
	}
	if s.connectFailed != 0 {
		s.w.mu.Unlock()
		return 0, s.peer, socketError("connect", s.connectFailed)
	}
	if s.hasPending { // an await's end its question did not finish
		r, from := s.pending, s.buf
		s.pending, s.hasPending, s.buf = result{}, false, nil
		if r.code == 0 && len(b) > 0 && len(from) > 0 && &b[0] != &from[0] {
			n := copy(b, from[:r.n])
			if s.stream && n < r.n {
				// The stream's bytes given back (the started question's
				// reads, with none finished) may be more than one
				// receiveTCP read takes: the rest is the next Receive's.
				s.pending, s.hasPending, s.buf = result{n: r.n - n, from: r.from}, true, from[n:r.n]
			}
			r.n = n
		}
		s.w.mu.Unlock()
		return r.ended(s.peer)
	}
	s.wait(b, deadline)
	parks.Add(1)
	s.w.mu.Unlock()
	if c := sockRecv(s.fd, uint32(len(b)), unixNanos(deadline)); c != 0 {
		s.w.mu.Lock()
		s.end(result{code: c})
		s.w.mu.Unlock()
	}
	r := <-s.done
	return r.ended(s.peer)
}

// ended is Receive's return for a wait that ended with r.
func (r *result) ended(peer netip.AddrPort) (int, netip.AddrPort, error) {
	if r.connect {
		return 0, peer, socketError("connect", r.code)
	}
	if r.code != 0 {
		return 0, peer, socketError("receive", r.code)
	}
	return r.n, r.from, nil
}

// Close releases the host's socket and ends a wait on it (the engine
// closes a socket under its Receive when the question's client goes).
func (s *hostSocket) Close() error {
	s.w.mu.Lock()
	if s.closed {
		s.w.mu.Unlock()
		return nil
	}
	s.closed = true
	delete(s.w.socks, s.fd)
	s.end(result{code: uint32(engine.ErrClosed)})
	s.w.mu.Unlock()
	if c := sockClose(s.fd); c != 0 {
		return socketError("close", c)
	}
	return nil
}

// deliver ends the wait the host's event answers; events for sockets
// closed meanwhile, or not waiting (a read the module already timed out),
// are dropped. A TCP connect's failure ends the wait under way as the
// connect's, or is kept for the socket's next Send or Receive.
func (w *waits) deliver(e *abi.Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.socks[e.ID]
	if s == nil {
		return
	}
	if e.Kind == abi.EventConnected {
		switch {
		case e.Code == 0: // nothing to do: the read that follows tells
		case s.waiting:
			s.end(result{code: e.Code, connect: true})
		default:
			s.connectFailed = e.Code
		}
		return
	}
	if !s.waiting {
		return
	}
	n := copy(s.buf, e.Data)
	s.end(result{n: n, from: e.From, code: e.Code})
}

// expire ends with a timeout every wait whose deadline is not after now,
// and reports whether it ended any.
func (w *waits) expire(now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.next.IsZero() || now.Before(w.next) {
		return false
	}
	ended := false
	w.next = time.Time{}
	for _, s := range w.socks {
		switch {
		case !s.waiting || s.deadline.IsZero():
		case !now.Before(s.deadline):
			s.end(result{code: uint32(engine.ErrTimeout)})
			ended = true
		case w.next.IsZero() || s.deadline.Before(w.next):
			w.next = s.deadline
		}
	}
	return ended
}

// deadline is the earliest deadline of a waiting socket (zero: none).
func (w *waits) deadline() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.next
}

// busy reports whether a socket waits (pooled idle sockets do not).
func (w *waits) busy() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.waiting > 0
}

func socketError(op string, c uint32) error {
	return &engine.SocketError{Op: op, Class: engine.ErrorClass(c)}
}

func bytesPtr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(unsafe.SliceData(b))
}

func unixNanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}
