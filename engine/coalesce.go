package engine

import (
	"hash/maphash"
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
//
// The map is keyed by the key's hash, computed once per question: a map
// keyed by cacheKey hashed its name at each of join's and land's two
// look-ups, and as WebAssembly (no AES instructions) string hashing is
// slow. Flights whose keys share a hash are chained (next); join compares
// whole keys.
type flights struct {
	mu sync.Mutex
	m  map[uint64]*flight
}

// flightSeed seeds the hash of the flights' keys (unknown to clients,
// so they cannot make chains long on purpose).
var flightSeed = maphash.MakeSeed()

// hash is k's hash for flights.
func (k *cacheKey) hash() uint64 {
	h := maphash.String(flightSeed, k.name)
	meta := uint64(k.qtype)<<32 | uint64(k.qclass)<<16
	if k.do {
		meta |= 1
	}
	if k.cd {
		meta |= 2
	}
	return (h ^ meta) * 0x9E3779B97F4A7C15
}

// flight is one shared upstream question. Flights are pooled: refs
// counts who may still read one (its leader, each follower, a question
// awaiting its detached copy), and the last to let go (release) puts it
// back. A flight is read by its holders only until they release it.
type flight struct {
	key  cacheKey
	hash uint64  // key.hash()
	next *flight // the next flight in the map whose key has the same hash

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

	// The leader's trace (hasLeader) and the followers' (served, added
	// under flights.mu): copies, as a question's trace may lie in its
	// front end's storage (QuestionContext), set again once the question
	// returns, and a flight may be read after that.
	leader    Trace
	hasLeader bool
	served    []Trace

	// waiters are the followers without a goroutine (JoinFlight), answered
	// on the leader's goroutine once it lands. Under flights.mu until
	// then.
	waiters []*waiter
}

// join returns the flight for k, and whether the caller leads it. tr is
// the caller's trace: a follower's is listed among those the flight
// served.
func (f *flights) join(k cacheKey, tr *Trace) (*flight, bool) {
	return f.joinHashed(k, k.hash(), tr)
}

// joinHashed is join for k whose hash is h.
func (f *flights) joinHashed(k cacheKey, h uint64, tr *Trace) (*flight, bool) {
	f.mu.Lock()
	head := f.m[h]
	for fl := head; fl != nil; fl = fl.next {
		if fl.key != k {
			continue
		}
		fl.refs.Add(1) // in the map: the leader has not let go
		if fl.done == nil {
			fl.done = make(chan struct{})
		}
		if tr != nil {
			fl.served = append(fl.served, *tr)
		}
		f.mu.Unlock()
		return fl, false
	}
	fl := f.start(k, h, tr)
	f.mu.Unlock()
	return fl, true
}

// start puts a new flight for k, whose hash is h, in the map, led by the
// question whose trace is tr, and returns it. The caller holds f.mu.
func (f *flights) start(k cacheKey, h uint64, tr *Trace) *flight {
	if f.m == nil {
		f.m = map[uint64]*flight{}
	}
	fl := flightPool.Get().(*flight)
	fl.key, fl.hash, fl.next = k, h, f.m[h]
	if tr != nil {
		fl.leader, fl.hasLeader = *tr, true
	}
	fl.refs.Store(1)
	f.m[h] = fl
	return fl
}

// find returns the flight for k, if one is in the map. The caller holds
// f.mu.
func (f *flights) find(k cacheKey) *flight { return f.findHashed(k, k.hash()) }

// findHashed is find for k whose hash is h.
func (f *flights) findHashed(k cacheKey, h uint64) *flight {
	for fl := f.m[h]; fl != nil; fl = fl.next {
		if fl.key == k {
			return fl
		}
	}
	return nil
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

// land ends the flight fl for k: later questions start a new one (or find
// the cache), and the followers wake. held, when not nil, is an entry
// that lives only as long as the leader's question (question.held): if
// it is fl's and a follower waits for fl, they get a copy. It returns
// fl's waiters, taken off it, for the leader to answer (flights.answer)
// while its question still holds held.
func (f *flights) land(k cacheKey, fl *flight, held *entry) []*waiter {
	f.mu.Lock()
	if head := f.m[fl.hash]; head == fl {
		if fl.next == nil {
			delete(f.m, fl.hash)
		} else {
			f.m[fl.hash] = fl.next
		}
	} else {
		for p := head; p != nil; p = p.next {
			if p.next == fl {
				p.next = fl.next
				break
			}
		}
	}
	fl.next = nil
	done := fl.done // no one joins or awaits fl any more
	ws := fl.waiters
	for _, w := range ws {
		w.fl = nil // ended by answer now; a cancel finds it taken off
	}
	f.mu.Unlock()
	if done != nil {
		if held != nil && fl.entry == held {
			fl.entry = held.copied()
		}
		close(done)
	}
	return ws
}

// abandons reports whether a leader's result is its own and not the
// question's: its client went away or its own question timeout ran out.
// A follower asks again rather than take it.
func abandons(r *found) bool {
	return r.result == ResultCancelled || (r.result == ResultUnavailable && r.reason == ReasonQuestionTimeout)
}

// flightPool holds flights no one reads any more.
var flightPool = sync.Pool{New: func() any { return new(flight) }}

// release lets go of fl: its leader once landed and done with it, a
// follower once it has read the result (or stopped waiting). The last
// puts it back in the pool, emptied; its served and waiters slices are
// kept for reuse.
func (fl *flight) release() {
	if fl.refs.Add(-1) != 0 {
		return
	}
	served, waiters := fl.served[:0], fl.waiters[:0]
	clear(fl.served)
	clear(fl.waiters)
	*fl = flight{served: served, waiters: waiters}
	flightPool.Put(fl)
}
