//go:build linux

package rawtcp

import (
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"
)

const supported = true

// Read reads what the socket holds, waiting in the poller (under the
// read deadline) only when it holds nothing.
func (c *Conn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	var n int
	var errno syscall.Errno
	err := c.rc.Read(func(fd uintptr) bool {
		for {
			r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
			switch e {
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false
			}
			n, errno = int(r), e
			return true
		}
	})
	switch {
	case err != nil:
		return 0, opError("read", c.TCPConn, err)
	case errno != 0:
		return 0, opError("read", c.TCPConn, errno)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// Write writes all of b, waiting in the poller (under the write
// deadline) whenever the socket's buffer is full.
func (c *Conn) Write(b []byte) (int, error) {
	var n int
	var errno syscall.Errno
	err := c.rc.Write(func(fd uintptr) bool {
		for n < len(b) {
			r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&b[n])), uintptr(len(b)-n))
			switch e {
			case 0:
				n += int(r)
			case syscall.EINTR:
			case syscall.EAGAIN:
				return false
			default:
				errno = e
				return true
			}
		}
		return true
	})
	switch {
	case err != nil:
		return n, opError("write", c.TCPConn, err)
	case errno != 0:
		return n, opError("write", c.TCPConn, errno)
	}
	return n, nil
}

// opError is the error net.TCPConn's Read or Write would return: the
// poller's (a deadline: os.ErrDeadlineExceeded; a closed connection:
// net.ErrClosed) or the system call's, with the operation and addresses.
func opError(op string, c *net.TCPConn, err error) error {
	if oe, ok := err.(*net.OpError); ok {
		err = oe.Err // the RawConn's "raw-read"/"raw-write" wrapping
	}
	if e, ok := err.(syscall.Errno); ok {
		err = os.NewSyscallError(op, e)
	}
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}
