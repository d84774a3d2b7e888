package engine

import (
	"sync"
	"sync/atomic"
	"time"
)

// flights lets concurrent identical questions (one cache key) share one
// upstream question. The first to arrive leads: it asks upstream on its own
// goroutine, under its own budget. The others follow: they wait, allocate
// no transaction and so are never refused by the ceiling, and build their
// own reply from the leader's entry.
//
// A leader that ends for reasons of its own (its client went away, its
// question timeout ran out) abandons the flight; its followers then race to
// lead a new one, so one client leaving never fails the others.
type flights struct {
	mu sync.Mutex
	m  map[cacheKey]*flight
}

// flight is one shared upstream question. Flights are pooled: refs
// counts who may still read one (its leader, each follower, a question
// awaiting its detached copy), and the last to let go (release) puts it
// back. A flight is read by its holders only until they release it.
type flight struct {
	// done is closed when the fields below are set. It is made when the
	// first follower joins (under flights.mu): most flights have none.
	done chan struct{}

	entry *entry // the answer or NXDOMAIN; nil otherwise
	// result and reason are the result when entry is nil (unavailable).
	result    Result
	reason    Reason
	abandoned bool // ended by the leader's own budget: ask again
	// spent and upstream are the leader's attempts and their time:
	// leaderID is the leading question's id, and a client whose detached
	// copy leads (raceStale) follows a flight of its own and takes them
	// as its own.
	spent    int32
	refs     atomic.Int32
	leaderID uint64
	upstream time.Duration
	tried    *tried // the leader's attempts, for the followers' EDE (unavailable only)

	leader *Trace   // the leader's trace
	served []*Trace // the followers' traces, added under flights.mu
}

// join returns the flight for k, and whether the caller leads it. tr is
// the caller's trace: a follower's is listed among those the flight
// served.
func (f *flights) join(k cacheKey, tr *Trace) (*flight, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fl := f.m[k]; fl != nil {
		fl.refs.Add(1) // in the map: the leader has not let go
		if fl.done == nil {
			fl.done = make(chan struct{})
		}
		if tr != nil {
			fl.served = append(fl.served, tr)
		}
		return fl, false
	}
	if f.m == nil {
		f.m = map[cacheKey]*flight{}
	}
	fl := flightPool.Get().(*flight)
	fl.leader = tr
	fl.refs.Store(1)
	f.m[k] = fl
	return fl, true
}

// awaited makes fl's done channel for a waiter that did not join it as a
// follower: a question whose detached copy leads it (raceStale). It holds
// fl for the waiter (release). Call it before the flight can land.
func (f *flights) awaited(fl *flight) {
	fl.refs.Add(1) // the leader has not let go
	f.mu.Lock()
	if fl.done == nil {
		fl.done = make(chan struct{})
	}
	f.mu.Unlock()
}

// land ends the flight for k: later questions start a new one (or find the
// cache), and the followers wake.
func (f *flights) land(k cacheKey, fl *flight) {
	f.mu.Lock()
	if f.m[k] == fl {
		delete(f.m, k)
	}
	done := fl.done
	f.mu.Unlock()
	if done != nil {
		close(done)
	}
}

// abandons reports whether a leader's result is its own and not the
// question's: its client went away or its own question timeout ran out.
// A follower asks again rather than take it.
func abandons(r found) bool {
	return r.result == ResultCancelled || (r.result == ResultUnavailable && r.reason == ReasonQuestionTimeout)
}

// flightPool holds flights no one reads any more.
var flightPool = sync.Pool{New: func() any { return new(flight) }}

// release lets go of fl: its leader once landed and done with it, a
// follower once it has read the result (or stopped waiting). The last
// puts it back in the pool, emptied; its served slice is kept for reuse.
func (fl *flight) release() {
	if fl.refs.Add(-1) != 0 {
		return
	}
	served := fl.served[:0]
	clear(fl.served)
	*fl = flight{served: served}
	flightPool.Put(fl)
}
