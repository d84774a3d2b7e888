// Package rawtcp gives the client connections of the DoH, DoT and
// plaintext listeners reads and writes without the runtime's system
// call bookkeeping.
//
// A read or write of a *net.TCPConn enters the runtime's "in a system
// call" state around the call (entersyscall/exitsyscall), although the
// socket is non-blocking and the call never waits: the runtime's poller
// does the waiting. Besides its own cost, that state is what wakes the
// runtime's sysmon thread whenever the process was idle a moment, and
// sysmon then ticks every 20 µs for the next millisecond: under a
// forwarding load that profiled at 5–6 % of dohfwd's CPU (perf, the
// miss load of scripts/bench-doh.sh), more than the HTTP/2 framing of a
// request. A Conn makes the same calls raw inside the poller's RawConn,
// which keeps the deadlines, the close and the wait for readiness as
// they are; everything else is the *net.TCPConn's.
package rawtcp

import (
	"net"
	"syscall"
)

// Conn is a *net.TCPConn whose Read and Write make raw system calls.
type Conn struct {
	*net.TCPConn
	rc syscall.RawConn
}

// TCP returns the connection underneath.
func (c *Conn) TCP() *net.TCPConn { return c.TCPConn }

// Wrap returns nc as a Conn when it is a *net.TCPConn and raw calls are
// available here; otherwise nc.
func Wrap(nc net.Conn) net.Conn {
	tc, ok := nc.(*net.TCPConn)
	if !ok || !supported {
		return nc
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nc
	}
	return &Conn{TCPConn: tc, rc: rc}
}

// Listen wraps every connection ln accepts (Wrap).
func Listen(ln net.Listener) net.Listener {
	if !supported {
		return ln
	}
	return listener{ln}
}

type listener struct{ net.Listener }

func (l listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return Wrap(c), nil
}
