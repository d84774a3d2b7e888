package limits

import (
	"net/netip"
	"time"
)

// entry is one client prefix's state. Its fields change under the
// Limiter's mutex.
type entry struct {
	l        *Limiter
	tokens   float64
	last     time.Time // when tokens was last brought up to date
	inFlight int32
	conns    int32
}

// refill brings the bucket up to now.
func (e *entry) refill(now time.Time, s *settings) {
	if d := now.Sub(e.last); d > 0 {
		e.tokens = min(s.burst, e.tokens+d.Seconds()*s.ClientQPS)
	}
	e.last = now
}

// idle says whether forgetting e loses nothing a fresh entry would not
// have: no hold, and a full bucket (or no rate limit).
func (e *entry) idle(now time.Time, s *settings) (held bool, full bool) {
	if e.inFlight > 0 || e.conns > 0 {
		return true, false
	}
	if s.ClientQPS <= 0 {
		return false, true
	}
	e.refill(now, s)
	return false, e.tokens >= s.burst
}

// ReleaseTransaction gives back a transaction slot (engine.ClientSlot).
func (e *entry) ReleaseTransaction() {
	e.l.mu.Lock()
	e.inFlight--
	e.l.mu.Unlock()
}

// table maps client prefixes to their entries, bounded: when it holds
// max entries, adding one first evicts an entry found among a sample of
// evictSample (Go's map order is random):
//   - an idle entry whose bucket is full: a fresh entry is the same, so
//     nothing is lost;
//   - else the idle entry with the fullest bucket: that prefix regains
//     at most a burst it had partly spent — the flood of distinct
//     prefixes is what fills the table, and each of those is new anyway;
//   - an entry holding a connection or a transaction is never evicted
//     (its release needs it); when the sample finds only those, the
//     table grows past max by one. Such entries are bounded elsewhere:
//     by limits.connections (or the descriptor limit) and the engine's
//     in-flight ceiling.
type table struct {
	owner *Limiter // what entries release through
	m     map[netip.Prefix]*entry
	max   int
}

const evictSample = 32

func (t *table) init(owner *Limiter, max int) {
	t.owner = owner
	if max <= 0 {
		max = DefaultMaxPrefixes
	}
	t.max = max
	t.m = make(map[netip.Prefix]*entry)
}

func (t *table) reset() { t.m = make(map[netip.Prefix]*entry) }

// get returns key's entry, making it (with a full bucket) if needed.
func (t *table) get(key netip.Prefix, now time.Time, s *settings) *entry {
	if e, ok := t.m[key]; ok {
		return e
	}
	if len(t.m) >= t.max {
		t.evict(now, s)
	}
	e := &entry{l: t.owner, tokens: s.burst, last: now}
	t.m[key] = e
	return e
}

func (t *table) evict(now time.Time, s *settings) {
	var (
		victim netip.Prefix
		best   = -1.0
		seen   int
	)
	for k, e := range t.m {
		held, full := e.idle(now, s)
		if full {
			delete(t.m, k)
			return
		}
		if !held && e.tokens > best {
			victim, best = k, e.tokens
		}
		if seen++; seen == evictSample {
			break
		}
	}
	if best >= 0 {
		delete(t.m, victim)
	}
}
