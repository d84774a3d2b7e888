package host

// sliceMemory is wazero's default linear memory: a Go slice that grows by
// copying. The fallback where address space cannot be reserved.
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

func (m *sliceMemory) Free() { m.b = nil }
