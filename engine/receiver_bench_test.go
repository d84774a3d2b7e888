//go:build linux

package engine_test

import (
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dohfwd/dohfwd/engine"
)

// receiverNetwork is the receiver-thread design the upstream loop
// (uploop_linux.go) was measured against, kept as a benchmark peer for
// the native network: pooled connected UDP sockets as raw non-blocking
// descriptors outside the runtime's poller, and one receiver per network
// (a goroutine locked to its OS thread) in its own epoll_wait over them,
// reading each ready socket and handing the datagram to the transaction
// waiting on it through a channel, as dnsdist's responder thread does for
// its backend sockets. A transaction sends with a direct write and waits
// on the channel with a per-socket timer for its deadline. Test code
// only: BenchmarkForwardUDPParallel and BenchmarkForwardUDPOneAtATime run
// it beside engine.NativeNetwork. A prototype for measuring: a socket
// closed while the receiver reads it may have its descriptor number
// reused under the receiver, which a product would have to rule out.
type receiverNetwork struct {
	epfd    int
	stop    [2]int // a pipe: writing to it ends the receiver
	mu      sync.Mutex
	sockets map[int32]*receiverSocket
}

func newReceiverNetwork(tb testing.TB) (*receiverNetwork, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	n := &receiverNetwork{epfd: epfd, sockets: map[int32]*receiverSocket{}}
	if err := syscall.Pipe2(n.stop[:], syscall.O_CLOEXEC); err != nil {
		return nil, err
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(n.stop[0])}
	if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, n.stop[0], &ev); err != nil {
		return nil, err
	}
	go n.receive()
	tb.Cleanup(func() { syscall.Write(n.stop[1], []byte{0}) })
	return n, nil
}

func (n *receiverNetwork) ReusesUDPSockets() bool { return true }

func (n *receiverNetwork) Open(t engine.Transport, server netip.AddrPort, source netip.Addr, deadline time.Time) (engine.Socket, error) {
	if t != engine.UDP || !server.Addr().Is4() {
		return engine.NativeNetwork{}.Open(t, server, source, deadline)
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, &engine.SocketError{Op: "open", Class: engine.ErrLocal, Err: err}
	}
	if err := syscall.Connect(fd, &syscall.SockaddrInet4{Port: int(server.Port()), Addr: server.Addr().As4()}); err != nil {
		syscall.Close(fd)
		return nil, &engine.SocketError{Op: "connect", Class: engine.ErrOther, Err: err}
	}
	s := &receiverSocket{net: n, fd: fd, peer: server, ch: make(chan delivery, 1), timer: time.NewTimer(time.Hour)}
	s.timer.Stop()
	n.mu.Lock()
	n.sockets[int32(fd)] = s
	n.mu.Unlock()
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLERR | -syscall.EPOLLET, Fd: int32(fd)}
	if err := syscall.EpollCtl(n.epfd, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
		s.Close()
		return nil, &engine.SocketError{Op: "open", Class: engine.ErrLocal, Err: err}
	}
	return s, nil
}

// receive is the receiver: epoll_wait, then read every ready socket until
// it is empty, each datagram to the transaction waiting on it.
func (n *receiverNetwork) receive() {
	runtime.LockOSThread()
	events := make([]syscall.EpollEvent, 128)
	buf := make([]byte, 4096)
	for {
		k, err := syscall.EpollWait(n.epfd, events, -1)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return
		}
		for _, ev := range events[:k] {
			if ev.Fd == int32(n.stop[0]) {
				syscall.Close(n.epfd)
				syscall.Close(n.stop[0])
				syscall.Close(n.stop[1])
				return
			}
			n.mu.Lock()
			s := n.sockets[ev.Fd]
			n.mu.Unlock()
			if s == nil {
				continue
			}
			for {
				m, err := syscall.Read(int(ev.Fd), buf)
				if err == syscall.EAGAIN || err == syscall.EBADF {
					break
				}
				s.deliver(buf[:max(m, 0)], err)
				if err != nil {
					break
				}
			}
		}
	}
}

const (
	idle = iota
	waiting
	delivering
)

type delivery struct {
	n   int
	err error
}

type receiverSocket struct {
	net    *receiverNetwork
	fd     int
	peer   netip.AddrPort
	state  atomic.Int32
	buf    []byte
	ch     chan delivery
	timer  *time.Timer
	closed atomic.Bool

	pending bool // Send is waiting into scratch
	scratch [4096]byte
}

// deliver hands a datagram (or a read error) to the waiting transaction;
// with none waiting it is dropped.
func (s *receiverSocket) deliver(b []byte, err error) {
	if !s.state.CompareAndSwap(waiting, delivering) {
		return
	}
	d := delivery{err: err}
	if err == nil {
		d.n = copy(s.buf, b)
	}
	s.ch <- d
}

func (s *receiverSocket) Exchange(q, b []byte, deadline time.Time) (int, netip.AddrPort, error) {
	s.buf = b
	s.state.Store(waiting)
	if _, err := syscall.Write(s.fd, q); err != nil {
		if !s.state.CompareAndSwap(waiting, idle) {
			<-s.ch
		}
		return 0, netip.AddrPort{}, &engine.SocketError{Op: "send", Class: errClass(err), Err: err}
	}
	return s.wait(deadline)
}

// Send (an engine without DatagramExchanger) waits from before the
// write, into the socket's own buffer, so that a reply that comes before
// Receive is not dropped.
func (s *receiverSocket) Send(q []byte) error {
	s.buf = s.scratch[:]
	s.pending = true
	s.state.Store(waiting)
	if _, err := syscall.Write(s.fd, q); err != nil {
		if !s.state.CompareAndSwap(waiting, idle) {
			<-s.ch
		}
		s.pending = false
		return &engine.SocketError{Op: "send", Class: errClass(err), Err: err}
	}
	return nil
}

func (s *receiverSocket) Receive(b []byte, deadline time.Time) (int, netip.AddrPort, error) {
	if s.pending {
		s.pending = false
		n, from, err := s.wait(deadline)
		return copy(b, s.scratch[:n]), from, err
	}
	s.buf = b
	s.state.Store(waiting)
	return s.wait(deadline)
}

func (s *receiverSocket) wait(deadline time.Time) (int, netip.AddrPort, error) {
	s.timer.Reset(time.Until(deadline))
	select {
	case d := <-s.ch:
		s.timer.Stop()
		s.state.Store(idle)
		if d.err != nil {
			return 0, netip.AddrPort{}, &engine.SocketError{Op: "receive", Class: errClass(d.err), Err: d.err}
		}
		return d.n, s.peer, nil
	case <-s.timer.C:
		if !s.state.CompareAndSwap(waiting, idle) {
			<-s.ch // being delivered: too late, the deadline passed
			s.state.Store(idle)
		}
		return 0, netip.AddrPort{}, &engine.SocketError{Op: "receive", Class: engine.ErrTimeout}
	}
}

func (s *receiverSocket) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.net.mu.Lock()
	delete(s.net.sockets, int32(s.fd))
	s.net.mu.Unlock()
	syscall.EpollCtl(s.net.epfd, syscall.EPOLL_CTL_DEL, s.fd, nil)
	s.deliver(nil, syscall.EBADF) // wakes a waiting transaction
	return syscall.Close(s.fd)
}

func errClass(err error) engine.ErrorClass {
	switch err {
	case syscall.ECONNREFUSED:
		return engine.ErrRefused
	case syscall.EBADF:
		return engine.ErrClosed
	}
	return engine.ErrOther
}
