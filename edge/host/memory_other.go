//go:build !unix

package host

func newLinearMemory(max uint64) linearMemory { return &sliceMemory{} }
