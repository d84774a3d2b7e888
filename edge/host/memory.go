package host

import "github.com/tetratelabs/wazero/experimental"

// linearMemory backs one instance's memory. enter and leave bracket every
// call into the instance, so the memory outlives a close that happens
// while a call runs; enter reports false once the memory is freed.
type linearMemory interface {
	experimental.LinearMemory
	enter() bool
	leave()
}

// sliceMemory is a Go slice that grows by copying, as wazero's default
// memory does: the fallback where address space cannot be reserved.
type sliceMemory struct{ b []byte }

func (m *sliceMemory) Reallocate(size uint64) []byte {
	if size > uint64(cap(m.b)) {
		next := make([]byte, size, size+size/4)
		copy(next, m.b)
		m.b = next
	}
	m.b = m.b[:size]
	return m.b
}

func (m *sliceMemory) Free()       {}
func (m *sliceMemory) enter() bool { return true }
func (m *sliceMemory) leave()      {}
