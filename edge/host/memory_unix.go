//go:build unix

package host

import (
	"math"
	"sync"
	"syscall"
)

// reservedMemory is a linear memory in address space reserved once for
// the module's maximum; growing makes more of the reservation readable
// and writable, in place. wazero's own memory is a Go slice grown by
// append: each memory.grow of the module's Go heap copied the whole
// memory into freshly faulted pages, which under load cost more than the
// requests themselves (edge/README.md, "Throughput").
//
// The mapping is only unmapped once no call runs on it: a module may be
// closed from inside a call (proc_exit, a runtime shutting down).
type reservedMemory struct {
	mu       sync.Mutex
	reserved []byte // the whole reservation; PROT_NONE beyond usable
	usable   uint64
	calls    int  // calls running on the memory (enter/leave)
	freed    bool // Free was called: unmap when calls reaches 0
}

// newLinearMemory reserves max bytes of address space, or falls back to a
// copying slice where that fails (a 32-bit host, an address-space ulimit).
func newLinearMemory(max uint64) linearMemory {
	if max == 0 || max > math.MaxInt {
		return &sliceMemory{}
	}
	b, err := syscall.Mmap(-1, 0, int(max), syscall.PROT_NONE, syscall.MAP_PRIVATE|syscall.MAP_ANON|syscall.MAP_NORESERVE)
	if err != nil {
		return &sliceMemory{}
	}
	return &reservedMemory{reserved: b}
}

func (m *reservedMemory) Reallocate(size uint64) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.freed || size > uint64(len(m.reserved)) {
		return nil
	}
	if size > m.usable {
		if err := syscall.Mprotect(m.reserved[m.usable:size], syscall.PROT_READ|syscall.PROT_WRITE); err != nil {
			return nil // the module sees memory.grow fail
		}
		m.usable = size
	}
	return m.reserved[:size:size]
}

func (m *reservedMemory) Free() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.freed = true
	m.unmapIdle()
}

func (m *reservedMemory) enter() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.freed {
		return false
	}
	m.calls++
	return true
}

func (m *reservedMemory) leave() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls--
	m.unmapIdle()
}

func (m *reservedMemory) unmapIdle() {
	if m.freed && m.calls == 0 && m.reserved != nil {
		syscall.Munmap(m.reserved)
		m.reserved, m.usable = nil, 0
	}
}
