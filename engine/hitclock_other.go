//go:build !wasip1

package engine

// hitEndsAtLookup: see hitclock_wasip1.go. Natively a clock reading is
// cheap, and a hit's Answered is read after its reply is written.
const hitEndsAtLookup = false
