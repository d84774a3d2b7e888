//go:build unix

package host

import (
	"math"
	"syscall"

	"github.com/tetratelabs/wazero/experimental"
)

// reservedMemory is a linear memory in address space reserved once for
// its maximum size; growing it makes more of the reservation readable and
// writable, in place. wazero's own memory is a Go slice that grows by
// append: every memory.grow of the module's Go heap copies the whole
// memory into freshly faulted pages, which under load cost more than the
// module's own code (see edge/README.md).
type reservedMemory struct {
	reserved  []byte // the whole reservation; PROT_NONE beyond usable
	usable    uint64
}

// newLinearMemory reserves max bytes of address space; where that fails
// (a 32-bit host, a ulimit), it falls back to a copying slice.
func newLinearMemory(capacity, max uint64) experimental.LinearMemory {
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
	if size > uint64(len(m.reserved)) {
		return nil
	}
	if size > m.usable {
		if err := syscall.Mprotect(m.reserved[m.usable:size], syscall.PROT_READ|syscall.PROT_WRITE); err != nil {
			return nil
		}
		m.usable = size
	}
	return m.reserved[:size:size]
}

func (m *reservedMemory) Free() {
	if m.reserved != nil {
		syscall.Munmap(m.reserved)
		m.reserved, m.usable = nil, 0
	}
}
