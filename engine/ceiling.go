package engine

import "sync/atomic"

// inFlight counts upstream transactions outstanding, against the ceiling.
type inFlight struct {
	n       atomic.Int64
	ceiling atomic.Int64
}

// acquire takes a slot, or reports that the ceiling is reached.
func (f *inFlight) acquire() bool {
	if f.n.Add(1) > f.ceiling.Load() {
		f.n.Add(-1)
		return false
	}
	return true
}

func (f *inFlight) release() { f.n.Add(-1) }
