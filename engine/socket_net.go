//go:build !wasip1 && !js

package engine

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"syscall"
	"time"
)

// NativeNetwork is the Network of the native build: real sockets from
// package net. Each Open makes a fresh socket; the kernel picks a random
// source port for UDP. Its connected UDP sockets may serve transaction
// after transaction from the engine's pool, unless FreshSockets is set.
type NativeNetwork struct {
	// FreshSockets turns socket reuse off: one socket per transaction.
	FreshSockets bool
	// TLS is the TLS of DoT upstreams (roots, session cache); nil takes
	// DefaultUpstreamTLS (dot_net.go).
	TLS *UpstreamTLS
	// DoH exchanges queries with https:// upstreams; nil fails them
	// (attempts end in connect_error).
	DoH HTTPSExchanger
}

// ReusesUDPSockets implements SocketReuser.
func (n NativeNetwork) ReusesUDPSockets() bool { return !n.FreshSockets }

func (n NativeNetwork) Open(t Transport, server netip.AddrPort, source netip.Addr, deadline time.Time) (Socket, error) {
	if t == UDP {
		var laddr *net.UDPAddr
		if source.IsValid() {
			laddr = net.UDPAddrFromAddrPort(netip.AddrPortFrom(source, 0))
		}
		c, err := net.DialUDP("udp", laddr, net.UDPAddrFromAddrPort(server))
		if err != nil {
			return nil, classify("open", err)
		}
		return newUDPSocket(c, server)
	}
	d := net.Dialer{Deadline: deadline}
	if source.IsValid() {
		d.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(source, 0))
	}
	c, err := d.Dial("tcp", server.String())
	if err != nil {
		return nil, classify("connect", err)
	}
	return &tcpSocket{c: c.(*net.TCPConn), peer: server}, nil
}

// udpSocket is a connected UDP socket. The kernel delivers it datagrams
// from its peer only, so what it reads came from peer.
type udpSocket struct {
	c    *net.UDPConn
	raw  syscall.RawConn
	peer netip.AddrPort
	step func(fd uintptr) bool // s.exchangeStep, bound once

	// The exchange in progress (a socket serves one transaction at a
	// time): what to send, where to read, and how it went.
	out, in  []byte
	sent     bool
	sendWait bool // the send found the socket's buffer full
	readNow  bool // read right after the send, before waiting
	n        int
	sendErr  error
	recvErr  error
	uses     uint32

	// rdeadline is the read deadline the socket has now (see
	// armDeadline).
	rdeadline time.Time
}

// keptDeadlineSlack is how much earlier than a transaction's deadline the
// socket's read deadline, set by an earlier transaction, may stay. Setting
// a read deadline costs two clock readings and a timer change in the
// runtime (about 3 % of a forwarded question's CPU); a pooled socket's
// transactions follow each other closely, so most keep the one they find.
// A deadline kept is never later than the transaction's, so the wait
// cannot outlast it; should the earlier one pass first, Exchange sets the
// transaction's own and waits on (see Exchange).
const keptDeadlineSlack = 100 * time.Millisecond

// armDeadline gives the socket a read deadline no later than deadline and
// at most keptDeadlineSlack earlier.
func (s *udpSocket) armDeadline(deadline time.Time) error {
	if !s.rdeadline.IsZero() && !deadline.Before(s.rdeadline) && deadline.Sub(s.rdeadline) <= keptDeadlineSlack {
		return nil
	}
	if err := s.c.SetReadDeadline(deadline); err != nil {
		s.rdeadline = time.Time{}
		return err
	}
	s.rdeadline = deadline
	return nil
}

// Whether to read right after the send. When the upstream answers within
// the few microseconds between the two system calls (a fast server on
// the same host, little load) the read finds the reply and the
// transaction never waits on the poller; under load it finds nothing,
// and the empty read is one system call wasted per transaction. So the
// read is tried while recent tries found the reply often enough, and on
// every probeEvery'th use of a socket otherwise, to notice a change.
const (
	immediateScale = 1024
	// readFirstAbove: an empty read costs about a third of a wait on
	// the poller (a park, an epoll_pwait, a wake-up), so reading first
	// pays when more than about a third of the replies are already there.
	readFirstAbove = immediateScale * 3 / 10
	probeEvery     = 16
)

// immediate is the share of recent reads right after the send that found
// the reply (an average decaying by 1/16 per try, in 1/1024ths). Updates
// from concurrent transactions may overwrite each other: it is an estimate.
var immediate atomic.Int32

func noteImmediate(found bool) {
	v := immediate.Load()
	sample := int32(0)
	if found {
		sample = immediateScale
	}
	immediate.Store(v + (sample-v)/16)
}

func newUDPSocket(c *net.UDPConn, peer netip.AddrPort) (*udpSocket, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		c.Close()
		return nil, classify("open", err)
	}
	s := &udpSocket{c: c, raw: raw, peer: netip.AddrPortFrom(peer.Addr().Unmap(), peer.Port())}
	s.step = s.exchangeStep
	return s, nil
}

// Exchange implements DatagramExchanger: one wait on the runtime's poller
// in which the first step sends and the next ones read. The poller's
// readiness is reset when the wait begins, before the send, so a reply
// that comes at once is not missed; and the wait begins with a read only
// while such reads find the reply often enough (see immediate).
func (s *udpSocket) Exchange(q, b []byte, deadline time.Time) (int, netip.AddrPort, error) {
	if err := s.armDeadline(deadline); err != nil {
		return 0, netip.AddrPort{}, classify("send", err) // nothing sent: as Send would fail
	}
	s.uses++
	s.readNow = immediate.Load() > readFirstAbove || s.uses%probeEvery == 0
	s.out, s.in, s.sent, s.sendWait, s.n, s.sendErr, s.recvErr = q, b, false, false, 0, nil, nil
	err := s.raw.Read(s.step)
	for err != nil && s.rdeadline.Before(deadline) && errors.Is(err, os.ErrDeadlineExceeded) {
		// The deadline an earlier transaction left passed first: wait
		// on until this one's (sending first if that did not happen).
		if err = s.c.SetReadDeadline(deadline); err != nil {
			s.rdeadline = time.Time{}
			break
		}
		s.rdeadline = deadline
		err = s.raw.Read(s.step)
	}
	s.out, s.in = nil, nil
	switch {
	case s.sendErr != nil:
		return 0, netip.AddrPort{}, errnoError("send", s.sendErr)
	case s.sendWait:
		// Rare: no room to send. Do it the ordinary way, which waits.
		if err := s.Send(q); err != nil {
			return 0, netip.AddrPort{}, err
		}
		return s.Receive(b, deadline)
	case err != nil && !s.sent:
		return 0, netip.AddrPort{}, classify("send", err) // nothing sent (closed): as Send would fail
	case err != nil:
		return 0, netip.AddrPort{}, classify("receive", err)
	case s.recvErr != nil:
		return 0, netip.AddrPort{}, errnoError("receive", s.recvErr)
	}
	return s.n, s.peer, nil
}

// exchangeStep is one step of Exchange, called by the runtime with the
// socket's descriptor; false means wait until it is readable.
func (s *udpSocket) exchangeStep(fd uintptr) bool {
	if !s.sent {
		s.sent = true
		_, err := syscall.Write(int(fd), s.out)
		for err == syscall.EINTR {
			_, err = syscall.Write(int(fd), s.out)
		}
		switch err {
		case nil:
			if !s.readNow {
				return false
			}
		case syscall.EAGAIN:
			s.sendWait = true
			return true
		default:
			s.sendErr = err
			return true
		}
		n, err := s.read(fd)
		noteImmediate(err != syscall.EAGAIN)
		return s.readDone(n, err)
	}
	return s.readDone(s.read(fd))
}

func (s *udpSocket) read(fd uintptr) (int, error) {
	n, err := syscall.Read(int(fd), s.in)
	for err == syscall.EINTR {
		n, err = syscall.Read(int(fd), s.in)
	}
	return n, err
}

// readDone records a read's result; false when it found nothing.
func (s *udpSocket) readDone(n int, err error) bool {
	if err == syscall.EAGAIN {
		return false
	}
	s.n, s.recvErr = n, err
	return true
}

// errnoError classifies an error of a system call made directly.
func errnoError(op string, err error) *SocketError {
	var call string
	if op == "send" {
		call = "write"
	} else {
		call = "read"
	}
	return classify(op, os.NewSyscallError(call, err))
}

func (s *udpSocket) Send(b []byte) error {
	if _, err := s.c.Write(b); err != nil {
		return classify("send", err)
	}
	return nil
}

// Receive reads one datagram from the peer (the socket is connected: the
// kernel delivers no other). It keeps a read deadline an earlier
// transaction left when it is close enough (armDeadline) and, should that
// pass first, waits on until deadline: a transaction whose query went out
// with Send (one StartMiss began) waits here, and a timer change per
// transaction was about 3 % of a forwarded question's CPU.
func (s *udpSocket) Receive(b []byte, deadline time.Time) (int, netip.AddrPort, error) {
	if err := s.armDeadline(deadline); err != nil {
		return 0, netip.AddrPort{}, classify("receive", err)
	}
	n, err := s.c.Read(b)
	for err != nil && s.rdeadline.Before(deadline) && errors.Is(err, os.ErrDeadlineExceeded) {
		if err = s.c.SetReadDeadline(deadline); err != nil {
			s.rdeadline = time.Time{}
			break
		}
		s.rdeadline = deadline
		n, err = s.c.Read(b)
	}
	if err != nil {
		return 0, netip.AddrPort{}, classify("receive", err)
	}
	return n, s.peer, nil
}

func (s *udpSocket) Close() error { return s.c.Close() }

// SyscallConn gives an edge host (edge/host) the socket's descriptor: it
// waits on it with the runtime's poller itself, one goroutine per socket
// for the socket's life, rather than a goroutine handed each read.
func (s *udpSocket) SyscallConn() (syscall.RawConn, error) { return s.raw, nil }

// SetReadDeadline sets the socket's read deadline. An edge host ends its
// own wait on the descriptor (SyscallConn) with one in the past, before
// closing the socket: Close waits for such a wait to end.
func (s *udpSocket) SetReadDeadline(t time.Time) error {
	s.rdeadline = time.Time{} // Exchange sets its own again
	return s.c.SetReadDeadline(t)
}

// ReceiveError classifies the failure of a read made directly on a
// native socket's descriptor (SyscallConn): read(2)'s errno, or the
// poller's error.
func ReceiveError(err error) *SocketError { return errnoError("receive", err) }

type tcpSocket struct {
	c    *net.TCPConn
	peer netip.AddrPort
}

func (s *tcpSocket) Send(b []byte) error {
	if _, err := s.c.Write(b); err != nil {
		return classify("send", err)
	}
	return nil
}

func (s *tcpSocket) Receive(b []byte, deadline time.Time) (int, netip.AddrPort, error) {
	if err := s.c.SetReadDeadline(deadline); err != nil {
		return 0, s.peer, classify("receive", err)
	}
	n, err := s.c.Read(b)
	if err != nil && n == 0 {
		return 0, s.peer, classify("receive", err)
	}
	return n, s.peer, nil
}

func (s *tcpSocket) Close() error { return s.c.Close() }

// classify maps an error from package net to the class the failure rules
// need. The errno decides; the operation only labels it.
func classify(op string, err error) *SocketError {
	se := &SocketError{Op: op, Class: ErrOther, Err: err}
	var errno syscall.Errno
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		se.Class = ErrTimeout
	case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
		se.Class = ErrClosed
	case errors.As(err, &errno):
		se.Class = errnoClass(errno)
		var ne *net.OpError
		if errors.As(err, &ne) && ne.Op == "dial" && se.Class == ErrLocal && op == "connect" {
			se.Op = "bind"
		}
	default:
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			se.Class = ErrTimeout
		}
	}
	return se
}

// errnoClass is the failure-rule class of one errno.
func errnoClass(errno syscall.Errno) ErrorClass {
	switch errno {
	case syscall.EMFILE, syscall.ENFILE, syscall.ENOMEM, syscall.ENOBUFS,
		syscall.EADDRNOTAVAIL, syscall.EADDRINUSE, syscall.EACCES, syscall.EPERM:
		return ErrLocal
	case syscall.ECONNREFUSED:
		return ErrRefused
	case syscall.ENETUNREACH, syscall.EHOSTUNREACH, syscall.ENETDOWN, syscall.EHOSTDOWN:
		return ErrUnreachable
	case syscall.ECONNRESET, syscall.EPIPE, syscall.ECONNABORTED:
		return ErrReset
	case syscall.ETIMEDOUT:
		return ErrTimeout
	}
	return ErrOther
}
