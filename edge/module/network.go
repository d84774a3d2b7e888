//go:build wasip1

package main

import (
	"encoding/binary"
	"net/netip"
	"time"
	"unsafe"

	"github.com/dohfwd/dohfwd/edge/abi"
	"github.com/dohfwd/dohfwd/engine"
)

// The socket interface the host provides. Addresses cross as text
// ("ip:port", source "ip" or empty); deadlines as Unix nanoseconds, 0 for
// none. Each returns 0, an engine.ErrorClass, or abi.Cancelled when the
// request's client has gone. A call blocks the whole
// instance until it returns, which is why a host runs one call at a time
// per instance.

//go:wasmimport dohfwd sock_open
func sockOpen(transport uint32, addr unsafe.Pointer, addrLen uint32, src unsafe.Pointer, srcLen uint32, deadline int64, fd unsafe.Pointer) uint32

//go:wasmimport dohfwd sock_send
func sockSend(fd uint32, b unsafe.Pointer, n uint32) uint32

//go:wasmimport dohfwd sock_recv
func sockRecv(fd uint32, b unsafe.Pointer, n uint32, deadline int64, info unsafe.Pointer) uint32

//go:wasmimport dohfwd sock_close
func sockClose(fd uint32) uint32

// hostNetwork is the engine's Network inside the module: every socket
// lives in the host.
type hostNetwork struct{}

func (hostNetwork) Open(t engine.Transport, server netip.AddrPort, source netip.Addr, deadline time.Time) (engine.Socket, error) {
	var addrBuf, srcBuf [64]byte
	addr := server.AppendTo(addrBuf[:0])
	var src []byte
	if source.IsValid() {
		src = source.AppendTo(srcBuf[:0])
	}
	var fd uint32
	if c := sockOpen(uint32(t), bytesPtr(addr), uint32(len(addr)), bytesPtr(src), uint32(len(src)), unixNanos(deadline), unsafe.Pointer(&fd)); c != 0 {
		op := "open"
		if t == engine.TCP {
			op = "connect"
		}
		return nil, socketError(op, c)
	}
	return &hostSocket{fd: fd, peer: server}, nil
}

type hostSocket struct {
	fd     uint32
	peer   netip.AddrPort
	closed bool
}

func (s *hostSocket) Send(b []byte) error {
	if c := sockSend(s.fd, bytesPtr(b), uint32(len(b))); c != 0 {
		return socketError("send", c)
	}
	return nil
}

func (s *hostSocket) Receive(b []byte, deadline time.Time) (int, netip.AddrPort, error) {
	var info [abi.RecvInfoSize]byte
	if c := sockRecv(s.fd, bytesPtr(b), uint32(len(b)), unixNanos(deadline), unsafe.Pointer(&info)); c != 0 {
		return 0, s.peer, socketError("receive", c)
	}
	n := int(binary.LittleEndian.Uint32(info[0:]))
	port := binary.LittleEndian.Uint16(info[4:])
	from := netip.AddrPortFrom(netip.AddrFrom16([16]byte(info[8:24])).Unmap(), port)
	return min(n, len(b)), from, nil
}

func (s *hostSocket) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	if c := sockClose(s.fd); c != 0 {
		return socketError("close", c)
	}
	return nil
}

// socketError is the engine's error for an import's code c. For
// abi.Cancelled the request's context is cancelled first, so the engine
// finds ctx.Err() set and counts the transaction cancelled, not charged
// to the server, exactly as when a native client goes away and its socket
// is closed under it.
func socketError(op string, c uint32) error {
	if c == abi.Cancelled {
		if cancelRequest != nil {
			cancelRequest()
		}
		return &engine.SocketError{Op: op, Class: engine.ErrClosed}
	}
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
