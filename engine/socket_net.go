//go:build !wasip1 && !js

package engine

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
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
		return &udpSocket{c: c}, nil
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

type udpSocket struct{ c *net.UDPConn }

func (s *udpSocket) Send(b []byte) error {
	if _, err := s.c.Write(b); err != nil {
		return classify("send", err)
	}
	return nil
}

func (s *udpSocket) Receive(b []byte, deadline time.Time) (int, netip.AddrPort, error) {
	if err := s.c.SetReadDeadline(deadline); err != nil {
		return 0, netip.AddrPort{}, classify("receive", err)
	}
	n, from, err := s.c.ReadFromUDPAddrPort(b)
	if err != nil {
		return 0, from, classify("receive", err)
	}
	return n, netip.AddrPortFrom(from.Addr().Unmap(), from.Port()), nil
}

func (s *udpSocket) Close() error { return s.c.Close() }

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
