//go:build wasm

package engine

import "sync/atomic"

// nameBuffer holds the name buffer AnswerNow borrows. As
// WebAssembly one thread runs every goroutine and a call that borrows it
// does not wait, so one buffer serves them all; a sync.Pool's pinning
// cost ~4% of a cache hit there. A borrower that finds the slot empty
// (none should) makes its own.
var nameBuffer atomic.Pointer[[maxNameText]byte]

func getNameBuffer() *[maxNameText]byte {
	if b := nameBuffer.Swap(nil); b != nil {
		return b
	}
	return new([maxNameText]byte)
}

func putNameBuffer(b *[maxNameText]byte) { nameBuffer.Store(b) }
