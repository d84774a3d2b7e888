package engine

import (
	"sync"
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

// flight is one shared upstream question.
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
	// as its own. The fields are ordered to keep a flight in 80 bytes.
	spent    int32
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
	fl := &flight{leader: tr}
	f.m[k] = fl
	return fl, true
}

// awaited makes fl's done channel for a waiter that did not join it as a
// follower: a question whose detached copy leads it (raceStale). Call it
// before the flight can land.
func (f *flights) awaited(fl *flight) {
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
