package host

import (
	"net/netip"
	"syscall"
	"time"

	"github.com/dohfwd/dohfwd/edge/abi"
	"github.com/dohfwd/dohfwd/engine"
)

// A UDP socket's reads. The module's engine pools its connected UDP
// sockets (engine/pool.go), so a host socket serves transaction after
// transaction. Each has one goroutine for its life, waiting on the
// runtime's poller for the descriptor to become readable (as the native
// engine's Exchange waits): a read the module asks for (sock_recv) is a
// flag set, not a goroutine handed a job, and the reply's readiness
// wakes the goroutine that reads it, queues its event and polls the
// module, as the engine's own goroutine would natively. No read deadline
// is set: the module keeps its deadlines (edge/abi), and a socket whose
// read timed out is closed by the engine, which ends the wait.
//
// The descriptor is edge-triggered: a wake-up comes when a datagram
// arrives, not while one waits unread. The goroutine never leaves its
// wait (syscall.RawConn.Read), whose start would forget a readiness that
// came before it, and the state below says when a datagram may sit
// unread, so that sock_recv reads at once rather than waiting.

// udpWait is a UDP socket's descriptor and its waiter's state, under the
// socket's mu.
type udpWait struct {
	raw   syscall.RawConn
	sysfd int            // the descriptor, valid while the socket is not closed
	peer  netip.AddrPort // the connected server: where every datagram comes from
	step  func(fd uintptr) bool
	// unread: readiness came while no read was asked for, so a datagram
	// may wait; sock_recv then reads before waiting.
	unread bool
	// sentSinceRead: a datagram went out since the last read delivered.
	// Otherwise sock_recv reads first: the last wake-up may have brought
	// more than the one datagram read (a late duplicate before the reply).
	// After a send the reply's own arrival wakes the waiter.
	sentSinceRead bool
	// delivering: the waiter is polling the module with what it read,
	// inside its wait. Closing the socket then would wait for that wait
	// to end, so a close (by that very poll, often) leaves it to the waiter.
	delivering, closeByWaiter bool
	failed                    uint32 // the wait ended on an error: the class every read gets
}

// rawConner is the native UDP socket (engine.NativeNetwork) giving its
// descriptor, and a way to end a wait on it without closing it.
type rawConner interface {
	SyscallConn() (syscall.RawConn, error)
	SetReadDeadline(t time.Time) error
}

// openUDP registers a UDP socket and, when it gives its descriptor,
// starts its waiter; otherwise its reads go to the reader goroutines.
func (in *Instance) openUDP(sock engine.Socket, server netip.AddrPort) *socket {
	s := &socket{sock: sock}
	rc, ok := sock.(rawConner)
	if !ok {
		return in.register(s)
	}
	raw, err := rc.SyscallConn()
	if err != nil {
		return in.register(s)
	}
	// unread starts false: whatever came before the waiter's wait began,
	// its first step reads (a read is wanted) or marks unread (none is).
	// So the first sock_recv, usually before the new goroutine runs, does
	// not read in the poll.
	u := &udpWait{raw: raw, peer: netip.AddrPortFrom(server.Addr().Unmap(), server.Port())}
	if raw.Control(func(fd uintptr) { u.sysfd = int(fd) }) != nil {
		return in.register(s)
	}
	u.step = func(fd uintptr) bool { return in.udpStep(s, fd) }
	s.udp = u
	in.register(s)
	go in.waitUDP(s)
	return s
}

// closable reports whether the closer is to close the socket now;
// otherwise its waiter closes it. Closing it under the waiter's wait
// would wait for that wait to end (FD.Close waits for the last
// reference): for the waiter to be scheduled, or, when the waiter is
// polling the module (often the very poll closing it), forever. So the
// waiter's wait is ended by a read deadline in the past and the waiter
// closes the socket on its way out, or after its poll. The caller holds
// the socket's mu and has set closed.
func (u *udpWait) closable(sock engine.Socket) bool {
	u.closeByWaiter = true
	if u.delivering {
		return false
	}
	if sock.(rawConner).SetReadDeadline(time.Unix(1, 0)) != nil {
		u.closeByWaiter = false
		return true
	}
	return false
}

// readUDP is sock_recv on a UDP socket; the caller holds s.mu, and s is
// neither closed nor reading. The read is named for the waiter, or done
// at once when a datagram may be waiting (its event then goes with the
// next poll).
func (in *Instance) readUDP(s *socket, max uint32) uint32 {
	u := s.udp
	if u.failed != 0 {
		return u.failed
	}
	s.reading, s.readMax = true, max
	in.receiving.Add(1)
	if u.unread || !u.sentSinceRead {
		in.readNow(s, uintptr(u.sysfd))
	}
	return 0
}

// readNow reads one datagram for the read asked for, and reports whether
// one came (or the read failed): its event is queued. The caller holds
// s.mu.
func (in *Instance) readNow(s *socket, fd uintptr) bool {
	bp := readBuffers.Get().(*[]byte)
	defer readBuffers.Put(bp)
	b := (*bp)[:min(int(s.readMax), len(*bp))]
	n, err := syscall.Read(int(fd), b)
	for err == syscall.EINTR {
		n, err = syscall.Read(int(fd), b)
	}
	u := s.udp
	if err == syscall.EAGAIN {
		u.unread = false
		return false
	}
	s.reading, u.sentSinceRead = false, false
	in.receiving.Add(-1)
	e := abi.Event{Kind: abi.EventRead, ID: s.fd, From: u.peer}
	if err != nil {
		e.Code = classOf(engine.ReceiveError(err))
	} else {
		e.Data = b[:n]
	}
	in.queue(&e)
	return true
}

// waitUDP is the socket's waiter: one wait on the poller for the socket's
// life, ended by its close.
func (in *Instance) waitUDP(s *socket) {
	err := s.udp.raw.Read(s.udp.step)
	s.mu.Lock()
	closeIt := s.udp.closeByWaiter
	if err != nil && !s.closed {
		// Not a close: the poller failed. Every read fails from now on.
		s.udp.failed = classOf(engine.ReceiveError(err))
		if s.reading {
			s.reading = false
			in.receiving.Add(-1)
			in.queue(&abi.Event{Kind: abi.EventRead, ID: s.fd, Code: s.udp.failed})
		}
	}
	if s.closed && s.reading {
		s.reading = false
		in.receiving.Add(-1)
	}
	s.mu.Unlock()
	if closeIt {
		s.sock.Close()
	}
	in.kickIfPending(finishOnCaller)
}

// udpStep runs inside the waiter's wait, once at its start and then at
// each wake-up: it reads when a read is asked for, and polls the module
// with the datagram. True ends the wait: the socket was closed.
func (in *Instance) udpStep(s *socket, fd uintptr) bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return true
	}
	u := s.udp
	if !s.reading {
		u.unread = true
		s.mu.Unlock()
		return false
	}
	if !in.readNow(s, fd) {
		s.mu.Unlock()
		return false
	}
	u.delivering = true
	s.mu.Unlock()
	in.kick()
	s.mu.Lock()
	u.delivering = false
	closed := s.closed
	s.mu.Unlock()
	return closed
}
