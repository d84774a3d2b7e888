//go:build linux

package engine

import (
	"syscall"
	"unsafe"
)

// System calls of the upstream loop that never wait: reads and writes
// on non-blocking datagram sockets and the eventfd, and epoll_wait with
// a zero timeout. They are made raw, without the runtime's
// entersyscall/exitsyscall: each costs a question a few hundred
// nanoseconds, and a goroutine seen "in a system call" by sysmon across
// one of its 20 µs ticks has its P taken and handed to another thread
// (a futex wake, then a P to find again on return), which under a miss
// load kept sysmon at its shortest tick (6 % of the process's CPU,
// profiled with perf). A call that cannot block holds its P no longer
// than ordinary Go code does.

func rawRead(fd int, b []byte) (int, error) {
	var p unsafe.Pointer
	if len(b) > 0 {
		p = unsafe.Pointer(&b[0])
	}
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(p), uintptr(len(b)))
		switch e {
		case 0:
			return int(n), nil
		case syscall.EINTR:
			continue
		}
		return 0, e
	}
}

func rawWrite(fd int, b []byte) (int, error) {
	var p unsafe.Pointer
	if len(b) > 0 {
		p = unsafe.Pointer(&b[0])
	}
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fd), uintptr(p), uintptr(len(b)))
		switch e {
		case 0:
			return int(n), nil
		case syscall.EINTR:
			continue
		}
		return 0, e
	}
}

// rawEpollPoll is epoll_wait with a zero timeout: it reports what is
// ready without waiting.
func rawEpollPoll(epfd int, events []syscall.EpollEvent) (int, error) {
	for {
		n, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), 0, 0, 0)
		switch e {
		case 0:
			return int(n), nil
		case syscall.EINTR:
			continue
		}
		return 0, e
	}
}
