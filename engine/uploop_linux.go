//go:build linux

package engine

import (
	"context"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"
)

// The upstream loop: dnsdist's design inside the Go
// runtime. One goroutine owns an epoll set of the pooled upstream UDP
// sockets (raw non-blocking connected descriptors, not in the runtime's
// poller) and is woken through the runtime's poller by the epoll
// descriptor's own readiness. On each wake it takes every ready socket
// with epoll_wait(0), reads each reply with one read (no empty reads),
// and writes each transaction's end into its started attempt (see
// started), as FinishWithReply does for a reply a front end read. A
// question whose end ends it (endsHere) is finished in place:
// ResolveMiss on the loop's goroutine (endKnown), the front end's
// response appended, the connections flushed once per round. Anything
// else (a timeout, a send or receive error, a failure rcode, a truncated
// reply, a cancel) is handed to a goroutine that may wait, which goes on
// through the ordinary path (goOn, then ask's further attempts).
//
// A transaction's deadline is kept in a heap with one timer for the
// earliest; the timer and cancels wake the loop through an eventfd.
// Mismatched and stray datagrams are counted and ignored as in
// receiveUDP, and make the socket unfit to reuse.
//
// Its sockets are non-blocking, so its reads, writes and polls are made
// raw (rawsys_linux.go): no entersyscall/exitsyscall around each, and no
// wake of sysmon by them.

// upLoopHolder is the engine's loop, made at its first use.
type upLoopHolder struct {
	once sync.Once
	loop *upLoop
	off  bool // the Network is not the native one, or the loop failed to start
}

// upLoopFor returns the engine's loop, or nil when it has none.
func (e *Engine) upLoopFor() *upLoop {
	h := &e.up
	h.once.Do(func() {
		if _, ok := e.network.(NativeNetwork); !ok || !e.reuse {
			h.off = true
			return
		}
		l, err := newUpLoop(e)
		if err != nil {
			h.off = true
			return
		}
		h.loop = l
	})
	if h.off {
		return nil
	}
	return h.loop
}

// closeUpLoop ends the engine's loop, if it runs.
func (e *Engine) closeUpLoop() {
	if l := e.up.loop; l != nil {
		l.close()
	}
}

type upLoop struct {
	e    *Engine
	epfd int
	file *os.File // epfd, in the runtime's poller
	rc   syscall.RawConn
	evfd int // eventfd: the timer and cancels wake the loop
	step func(uintptr) bool

	mu      sync.Mutex
	socks   map[int32]*loopSock // by descriptor
	gen     uint32
	heap    []*loopSock // busy sockets by deadline
	timer   *time.Timer
	timerAt time.Time
	done    []loopDone // transactions ended, their continuations to run
	poked   bool
	closed  bool

	// The loop goroutine's own.
	events  [128]syscall.EpollEvent
	running []loopDone
	flush   []Flusher
	scratch [512]byte
	ended   chan struct{}
}

// loopDone is a transaction that ended: its question's continuation and
// whether it may run on the loop.
type loopDone struct {
	then MissContinuation
	here bool
}

// loopSock is a connected UDP socket in the loop's epoll set.
type loopSock struct {
	l      *upLoop
	fd     int
	gen    uint32
	closed bool
	bad    bool // a datagram came while no transaction ran: never reused
	// The transaction on it, nil while none runs.
	bufs     *askBuffers
	ctx      context.Context
	then     MissContinuation
	strays   bool
	deadline time.Time // the transaction's, kept here for the heap
	hi       int       // index in the heap
}

func newUpLoop(e *Engine) (*upLoop, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	if err := syscall.SetNonblock(epfd, true); err != nil {
		syscall.Close(epfd)
		return nil, err
	}
	r, _, errno := syscall.Syscall(syscall.SYS_EVENTFD2, 0, syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if errno != 0 {
		syscall.Close(epfd)
		return nil, errno
	}
	evfd := int(r)
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(evfd)}
	if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, evfd, &ev); err != nil {
		syscall.Close(epfd)
		syscall.Close(evfd)
		return nil, err
	}
	f := os.NewFile(uintptr(epfd), "uploop")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		syscall.Close(evfd)
		return nil, err
	}
	l := &upLoop{e: e, epfd: epfd, file: f, rc: rc, evfd: evfd, socks: map[int32]*loopSock{}, ended: make(chan struct{})}
	l.step = l.wake
	go l.run()
	return l, nil
}

func (l *upLoop) run() {
	defer close(l.ended)
	for {
		if err := l.rc.Read(l.step); err != nil {
			return
		}
	}
}

// wake takes every ready socket: false makes the runtime park the loop
// until the epoll set is readable again. A round that found fewer sockets
// than the events buffer holds took all there were: no empty epoll_wait
// to confirm it. A datagram that comes during the round wakes the epoll
// set's descriptor, which the runtime's poller records (the readiness is
// reset only when Read begins), so the park returns at once. The one
// datagram left unseen is a second one queued on a socket whose first was
// read: a stray after the reply (seen at the next wake, or by the next
// transaction on the socket: it closes the socket either way) or the
// reply after a mismatched datagram, which readOne reads at once.
func (l *upLoop) wake(uintptr) bool {
	for {
		n, err := rawEpollPoll(l.epfd, l.events[:])
		if err != nil {
			return true // closed
		}
		if n == 0 {
			return false
		}
		l.round(l.events[:n])
		if n < len(l.events) {
			return false
		}
	}
}

// round reads what the ready sockets hold, then runs the continuations
// of the transactions that ended and flushes what they wrote.
func (l *upLoop) round(evs []syscall.EpollEvent) {
	l.mu.Lock()
	for i := range evs {
		ev := &evs[i]
		if int(ev.Fd) == l.evfd {
			var b [8]byte
			rawRead(l.evfd, b[:])
			l.poked = false
			l.expire()
			continue
		}
		s := l.socks[ev.Fd]
		if s == nil || s.gen != uint32(ev.Pad) {
			continue
		}
		l.readOne(s)
	}
	l.running, l.done = l.done, l.running[:0]
	l.mu.Unlock()
	for i, d := range l.running {
		l.running[i] = loopDone{}
		if !d.here {
			d.then.ResolveElsewhere()
			continue
		}
		if f := d.then.ResolveHere(); f != nil && !hasFlusher(l.flush, f) {
			l.flush = append(l.flush, f)
		}
	}
	for i, f := range l.flush {
		f.Flush()
		l.flush[i] = nil
	}
	l.flush = l.flush[:0]
}

func hasFlusher(fs []Flusher, f Flusher) bool {
	for _, g := range fs {
		if g == f {
			return true
		}
	}
	return false
}

// readOne reads one datagram from s (l.mu held).
func (l *upLoop) readOne(s *loopSock) {
	buf := l.scratch[:]
	if s.bufs != nil {
		buf = s.bufs.recv[:]
	}
	n, err := rawRead(s.fd, buf)
	if err == syscall.EAGAIN {
		return
	}
	if s.bufs == nil {
		// Nothing runs on it: a stray, or an error for an earlier
		// transaction. It is not reused and wakes the loop no more.
		s.bad = true
		syscall.EpollCtl(l.epfd, syscall.EPOLL_CTL_DEL, s.fd, nil)
		return
	}
	bufs := s.bufs
	tx, r := &bufs.tx, &bufs.first.res
	if err != nil {
		l.e.socketFailure(s.ctx, tx, errnoError("receive", err), OutcomeRecvError, r)
		l.end(s, false)
		return
	}
	if l.e.matched(tx, buf[:n], UDP, r) {
		if tx.retryBadCookie(r) {
			if _, err := rawWrite(s.fd, tx.query[2:]); err != nil {
				l.e.socketFailure(s.ctx, tx, errnoError("send", err), OutcomeSendError, r)
				l.end(s, false)
				return
			}
			l.readOne(s)
			return
		}
		r.clean = !s.strays && usedCleanly(r.outcome)
		l.end(s, endsHere(r.outcome))
		return
	}
	s.strays = true
	cookieless := r.cookieless
	*r = exchangeResult{}
	r.cookieless = cookieless
	l.readOne(s) // the reply may be queued behind it
}

// end ends s's transaction (l.mu held): its continuation is queued for the
// loop's round.
func (l *upLoop) end(s *loopSock, here bool) {
	s.bufs.first.endedAt = time.Now()
	l.remove(s)
	l.done = append(l.done, loopDone{then: s.then, here: here})
	s.bufs, s.ctx, s.then = nil, nil, nil
}

// poke wakes the loop (l.mu held).
func (l *upLoop) poke() {
	if l.poked || l.closed {
		return
	}
	l.poked = true
	one := [8]byte{1}
	rawWrite(l.evfd, one[:])
}

func (l *upLoop) timerFired() {
	l.mu.Lock()
	l.timerAt = time.Time{}
	l.poke()
	l.mu.Unlock()
}

// expire ends the transactions whose deadline passed and arms the timer
// for the next (l.mu held).
func (l *upLoop) expire() {
	now := time.Now()
	for len(l.heap) > 0 && !l.heap[0].deadline.After(now) {
		s := l.heap[0]
		l.e.socketFailure(s.ctx, &s.bufs.tx, &SocketError{Op: "receive", Class: ErrTimeout, Err: os.ErrDeadlineExceeded}, OutcomeRecvError, &s.bufs.first.res)
		l.end(s, false)
	}
	l.arm()
}

// arm sets the timer for the earliest deadline, unless it fires before.
func (l *upLoop) arm() {
	if len(l.heap) == 0 || l.closed {
		return
	}
	d := l.heap[0].deadline
	if !l.timerAt.IsZero() && !l.timerAt.After(d) {
		return
	}
	l.timerAt = d
	if l.timer == nil {
		l.timer = time.AfterFunc(time.Until(d), l.timerFired)
	} else {
		l.timer.Reset(time.Until(d))
	}
}

// The heap of busy sockets by their transaction's deadline.
func (l *upLoop) less(i, j int) bool {
	return l.heap[i].deadline.Before(l.heap[j].deadline)
}

func (l *upLoop) swap(i, j int) {
	h := l.heap
	h[i], h[j] = h[j], h[i]
	h[i].hi, h[j].hi = i, j
}

func (l *upLoop) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !l.less(i, p) {
			return
		}
		l.swap(i, p)
		i = p
	}
}

func (l *upLoop) down(i int) {
	n := len(l.heap)
	for {
		c := 2*i + 1
		if c >= n {
			return
		}
		if c+1 < n && l.less(c+1, c) {
			c++
		}
		if !l.less(c, i) {
			return
		}
		l.swap(i, c)
		i = c
	}
}

func (l *upLoop) push(s *loopSock) {
	s.hi = len(l.heap)
	l.heap = append(l.heap, s)
	l.up(s.hi)
	l.arm()
}

func (l *upLoop) remove(s *loopSock) {
	i, last := s.hi, len(l.heap)-1
	if i < 0 {
		return
	}
	if i != last {
		l.swap(i, last)
	}
	l.heap[last] = nil
	l.heap = l.heap[:last]
	if i != last {
		l.down(i)
		l.up(i)
	}
	s.hi = -1
}

// open opens a connected UDP socket to peer in the loop's epoll set.
func (l *upLoop) open(peer netip.AddrPort) (*loopSock, error) {
	var sa syscall.Sockaddr
	family := syscall.AF_INET
	a := peer.Addr().Unmap()
	if a.Is4() {
		sa = &syscall.SockaddrInet4{Port: int(peer.Port()), Addr: a.As4()}
	} else {
		family = syscall.AF_INET6
		sa = &syscall.SockaddrInet6{Port: int(peer.Port()), Addr: a.As16()}
	}
	fd, err := syscall.Socket(family, syscall.SOCK_DGRAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, classify("open", os.NewSyscallError("socket", err))
	}
	if err := syscall.Connect(fd, sa); err != nil {
		syscall.Close(fd)
		return nil, classify("open", os.NewSyscallError("connect", err))
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		syscall.Close(fd)
		return nil, &SocketError{Op: "open", Class: ErrClosed, Err: net.ErrClosed}
	}
	l.gen++
	s := &loopSock{l: l, fd: fd, gen: l.gen, hi: -1}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(fd), Pad: int32(s.gen)}
	if err := syscall.EpollCtl(l.epfd, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
		l.mu.Unlock()
		syscall.Close(fd)
		return nil, classify("open", os.NewSyscallError("epoll_ctl", err))
	}
	l.socks[int32(fd)] = s
	l.mu.Unlock()
	return s, nil
}

// loopSock is a Socket only to be watched for a cancel and pooled: the
// loop sends and reads on it.
func (s *loopSock) Send([]byte) error {
	return &SocketError{Op: "send", Class: ErrOther, Err: net.ErrClosed}
}

func (s *loopSock) Receive([]byte, time.Time) (int, netip.AddrPort, error) {
	return 0, netip.AddrPort{}, &SocketError{Op: "receive", Class: ErrOther, Err: net.ErrClosed}
}

// Close closes the socket; a transaction running on it ends (a client's
// cancel: see socketFailure) and its question goes on elsewhere.
func (s *loopSock) Close() error {
	l := s.l
	l.mu.Lock()
	if s.closed {
		l.mu.Unlock()
		return nil
	}
	s.closed = true
	if s.bufs != nil {
		l.e.socketFailure(s.ctx, &s.bufs.tx, &SocketError{Op: "receive", Class: ErrClosed, Err: net.ErrClosed}, OutcomeRecvError, &s.bufs.first.res)
		l.end(s, false)
		l.poke()
	}
	if !s.bad && !l.closed { // once closed, epfd's number may be another file's
		syscall.EpollCtl(l.epfd, syscall.EPOLL_CTL_DEL, s.fd, nil)
	}
	delete(l.socks, int32(s.fd))
	syscall.Close(s.fd)
	l.mu.Unlock()
	return nil
}

// close ends the loop: transactions on it end (closed) and go on elsewhere.
func (l *upLoop) close() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	if l.timer != nil {
		l.timer.Stop()
	}
	for len(l.heap) > 0 {
		s := l.heap[0]
		l.e.socketFailure(s.ctx, &s.bufs.tx, &SocketError{Op: "receive", Class: ErrClosed, Err: net.ErrClosed}, OutcomeRecvError, &s.bufs.first.res)
		l.end(s, false)
	}
	l.mu.Unlock()
	l.file.Close()
	<-l.ended
	syscall.Close(l.evfd)
	l.mu.Lock()
	done := l.done
	l.done = nil
	l.mu.Unlock()
	for _, d := range done {
		d.then.ResolveElsewhere()
	}
}

// loopStart begins tx's transaction on the loop: a socket from the
// server's loop pool (or a fresh one), watched for ctx's cancel, the
// transaction registered, the query sent. It reports false when the loop
// cannot take it (the caller sends the ordinary way). Once it reports
// true, then runs exactly once, when the transaction ended; its result
// is in s.res.
func (e *Engine) loopStart(ctx context.Context, tx *transaction, s *started, then MissContinuation) bool {
	l := e.upLoopFor()
	if l == nil || tx.transport != UDP || tx.source.IsValid() {
		return false
	}
	pool := tx.server.loopPools.get(netip.Addr{})
	if pool == nil {
		return false
	}
	tx.begin()
	var ls *loopSock
	for fresh := false; ; fresh = true {
		ps, ok := pooledSocket{}, false
		if !fresh {
			ps, ok = pool.take(tx.deadline)
		}
		if !ok {
			sock, err := l.open(tx.server.addr)
			if err != nil {
				return false // the ordinary path opens one, or meets the error
			}
			ps = pooledSocket{sock: sock, born: time.Now()}
		}
		ls = ps.sock.(*loopSock)
		s.x = exchanging{pool: pool, ps: ps}
		s.outside, s.res, s.endedAt = true, exchangeResult{}, time.Time{}
		// Watched before it is registered: once registered, the loop may
		// end the transaction and its continuation read s at any time.
		s.x.stop = closeOnCancel(ctx, ls)
		l.mu.Lock()
		if !l.closed && (!ls.bad || ls.closed) {
			break // l.mu held
		}
		l.mu.Unlock()
		stopClosing(ctx, ls, s.x.stop)
		ls.Close()
		s.x, s.outside = exchanging{}, false
		if l.closed {
			return false // the ordinary path sends
		}
		// A stray came to the idle socket: closed, and a fresh one taken.
	}
	ls.bufs, ls.ctx, ls.then, ls.strays, ls.deadline = tx.bufs, ctx, then, false, tx.deadline
	if ls.closed {
		// Its client left already: the transaction ends cancelled.
		e.socketFailure(ctx, tx, &SocketError{Op: "send", Class: ErrClosed, Err: net.ErrClosed}, OutcomeSendError, &s.res)
		l.end(ls, false)
		l.poke()
		l.mu.Unlock()
		return true
	}
	l.push(ls)
	_, err := rawWrite(ls.fd, tx.query[2:])
	if err != nil {
		se := errnoError("send", err)
		if err == syscall.EAGAIN {
			se.Class = ErrLocal // the socket's own buffer is full: not the server's fault
		}
		e.socketFailure(ctx, tx, se, OutcomeSendError, &s.res)
		l.end(ls, false)
		l.poke()
	}
	l.mu.Unlock()
	return true
}
