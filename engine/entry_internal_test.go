package engine

import "testing"

// TestEntryForRoom: every size gets an empty msg with room for it, inside
// the entry's allocation up to the largest tier and beyond it on its own.
func TestEntryForRoom(t *testing.T) {
	for n := 0; n <= 1500; n++ {
		en := entryFor(n)
		if len(en.msg) != 0 || cap(en.msg) < n {
			t.Fatalf("entryFor(%d): len %d cap %d", n, len(en.msg), cap(en.msg))
		}
		if n > 456 && cap(en.msg) != n {
			t.Fatalf("entryFor(%d): cap %d, want a buffer of its own of %d", n, cap(en.msg), n)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = entryFor(100) }); n != 1 {
		t.Fatalf("entryFor(100): %v allocations, want 1", n)
	}
}
