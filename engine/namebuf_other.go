//go:build !wasm

package engine

import "sync"

// nameBuffers hold the names AnswerNow borrows.
var nameBuffers = sync.Pool{New: func() any { return new([maxNameText]byte) }}

func getNameBuffer() *[maxNameText]byte { return nameBuffers.Get().(*[maxNameText]byte) }

func putNameBuffer(b *[maxNameText]byte) { nameBuffers.Put(b) }
