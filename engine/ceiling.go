package engine

import "sync/atomic"

// inFlight counts upstream transactions outstanding, against the ceiling.
type inFlight struct {
	n       atomic.Int64
	ceiling atomic.Int64
}

// acquire takes a slot, or reports that the ceiling is reached.
func (f *inFlight) acquire() bool {
	if refusedAt(f.n.Add(1)-1, f.ceiling.Load()) {
		f.n.Add(-1)
		return false
	}
	return true
}

func (f *inFlight) release() { f.n.Add(-1) }

// refusedAt is the ceiling rule: with n transactions outstanding, one more
// is refused when it would exceed ceiling.
func refusedAt(n, ceiling int64) bool { return n+1 > ceiling }
