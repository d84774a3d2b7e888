package engine

import (
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// Transport is the protocol of one transaction.
type Transport uint8

const (
	UDP Transport = iota
	TCP
	DoT // DNS over TLS (RFC 7858), through a TLSOpener
	DoH // DNS over HTTPS (RFC 8484), through an HTTPSExchanger
)

var transportNames = [...]string{"udp", "tcp", "dot", "doh"}

func (t Transport) String() string {
	if int(t) < len(transportNames) {
		return transportNames[t]
	}
	return "udp"
}

// Network opens transaction sockets. It is the engine's only way to the
// network: the native build implements it with package net, an edge host
// with its own sockets, tests in memory.
type Network interface {
	// Open returns a socket for one transaction to server, bound to source
	// when source is valid. Connecting a TCP socket gives up at deadline.
	// A TCP socket may be returned while its connect goes on (the edge
	// module's, whose host connects between polls): Send then hands the
	// bytes over for when it connects, and a failed connect comes from
	// Send or Receive as a *SocketError with Op "connect". Errors are
	// *SocketError.
	Open(t Transport, server netip.AddrPort, source netip.Addr, deadline time.Time) (Socket, error)
}

// ConnectsLater is implemented by a Network whose TCP Open returns at
// once, the connect going on after it (see Network.Open): the edge
// module's, whose host connects between polls. The engine then opens
// without a goroutine watching the client while Open waits, as there is
// no wait; a client that goes away closes the socket as any other.
type ConnectsLater interface {
	ConnectsLater() bool
}

// Socket is one transaction's socket. For UDP each Send and Receive is one
// datagram; for TCP they are parts of the byte stream (the engine frames
// messages itself, so matching stays inside the engine).
type Socket interface {
	// Send writes b whole.
	Send(b []byte) error
	// Receive reads into b, waiting no later than deadline, and reports
	// the peer the bytes came from. At deadline it returns a *SocketError
	// of class ErrTimeout.
	Receive(b []byte, deadline time.Time) (n int, from netip.AddrPort, err error)
	// Close releases the socket. It may be called while Receive waits,
	// from another goroutine, and makes that Receive return.
	Close() error
}

// DatagramExchanger is implemented by a UDP Socket that sends a query and
// waits for a datagram in one call. The engine uses it, when there, for a
// transaction's first datagram; later ones come from Receive. The native
// socket does the send from inside its wait for readability, so the wait
// does not begin with a read that finds the socket empty (one system call
// fewer per transaction).
type DatagramExchanger interface {
	// Exchange sends q whole, then reads one datagram into b, waiting no
	// later than deadline. Errors are *SocketError whose Op says which
	// step failed: "send", or "receive".
	Exchange(q, b []byte, deadline time.Time) (n int, from netip.AddrPort, err error)
}

// ErrorClass is what the failure rules need to know about a socket error.
// The values are part of the edge module's host interface: keep them stable.
type ErrorClass uint8

const (
	ErrOther       ErrorClass = 1 // any other failure: charged to the server
	ErrTimeout     ErrorClass = 2 // the deadline passed
	ErrRefused     ErrorClass = 3 // connection refused, ICMP port unreachable
	ErrUnreachable ErrorClass = 4 // network or host unreachable
	ErrReset       ErrorClass = 5 // reset or broken pipe
	ErrClosed      ErrorClass = 6 // the peer closed (EOF), or the socket was closed locally
	ErrLocal       ErrorClass = 7 // local resources or permission: EMFILE, ENFILE, ENOMEM, ENOBUFS, EADDRNOTAVAIL, EADDRINUSE, EACCES, EPERM
	ErrTLS         ErrorClass = 8 // the TLS handshake failed: a wrong or untrusted certificate, a pin that does not match, a protocol alert
	ErrHTTP        ErrorClass = 9 // a DoH reply the HTTP exchange refused: a status other than 200, another content type, a body that does not fit
)

var errorClassNames = [...]string{"", "other", "timeout", "refused", "unreachable", "reset", "closed", "local", "tls", "http"}

func (c ErrorClass) String() string {
	if int(c) < len(errorClassNames) && c != 0 {
		return errorClassNames[c]
	}
	return fmt.Sprintf("class(%d)", uint8(c))
}

// SocketError is the error every Network and Socket returns.
type SocketError struct {
	Op    string // "open", "bind", "connect", "handshake", "send", "receive"
	Class ErrorClass
	Err   error // the underlying error, if any
}

func (e *SocketError) Error() string {
	if e.Err != nil {
		return e.Op + ": " + e.Class.String() + ": " + e.Err.Error()
	}
	return e.Op + ": " + e.Class.String()
}

func (e *SocketError) Unwrap() error { return e.Err }

// Timeout reports whether the deadline passed, for net.Error-style callers.
func (e *SocketError) Timeout() bool { return e.Class == ErrTimeout }

// classOf returns the class of err; errors that are not *SocketError count
// as ErrOther, so a Network that forgets to classify still fails safely.
func classOf(err error) ErrorClass {
	var se *SocketError
	if errors.As(err, &se) {
		return se.Class
	}
	return ErrOther
}
