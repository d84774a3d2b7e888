package engine

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/maypok86/otter/v2"
)

// HotEntries answers, natively, the cache hits on the hot entries
// another engine published (PublishHotEntries): an edge host's mirror of
// the hot entries of the engine in its WebAssembly module, built from
// this package's code so the rules are not written twice. It reads a question as that engine does (the
// same parse, route and key), and answers it from a published entry as
// that engine would at the same moment (the same reply, Response, counters
// and question event), or reports false having done nothing, and the host
// asks the engine. It has the engine's configuration for routing alone:
// it never goes upstream, and its cache is only what was published.
//
// A published entry is served while its hits are pure reads of the
// engine's state (see PublishHotEntries): to its TTL, or with prefetch
// on to the last tenth of it. The engine publishes no removals; the
// mirror keeps its own bound (the configured cache size) and serves an
// entry the engine evicted only while it is fresh, as the engine would
// have.
type HotEntries struct {
	// e is the counters, observer and question IDs readImmediate and
	// respond use; its routes are not set (see mirrorCache).
	e     *Engine
	cache atomic.Pointer[mirrorCache]
	// taking is false while a reload is under way (Suspend): records
	// then may have been read under either configuration, and are
	// dropped.
	taking atomic.Bool
	mu     sync.Mutex // serialises Reconfigure
}

// mirrorCache is a mirror's published entries, emptied by each reload,
// and the routes of the configuration they were published under: a
// reader loads both at once (one pointer), so it never pairs the entries
// of one configuration with the routes of another.
type mirrorCache struct {
	entries mirroredEntries
	routes  *routes
	clock   *fedClock
	any     atomic.Bool // something was published: before that no query is read
}

// mirroredEntries is the mirror's otter cache. An interface, so that only
// newMirrorCache names the concrete type: the engine's readImmediate
// calls mirrorCache.hit, and a binary that never makes a HotEntries
// (dohfwd) would otherwise link otter's code for this entry type, about
// 400 KB.
type mirroredEntries interface {
	GetEntryQuietly(key cacheKey) (otter.Entry[cacheKey, mirrored], bool)
	Set(key cacheKey, value mirrored) (mirrored, bool)
	EstimatedSize() int
}

// mirrored is a published entry and whether its engine prefetches it.
type mirrored struct {
	en       *entry
	prefetch bool
}

// servable reports whether a hit at now is a pure read of the engine's
// state (PublishHotEntries): live, and before the prefetch window. The stored
// time is the mirror's own monotonic reading (parseHitRecord), so it
// ages as the engine's entry does.
func (m mirrored) servable(now time.Time) bool {
	return m.en.live(now) && !(m.prefetch && inPrefetchWindow(m.en, now))
}

// mirrorQuestionIDs is where a mirror's question IDs start, so that its
// question events are not mistaken for its engine's.
const mirrorQuestionIDs = 1 << 62

// NewHotEntries returns a mirror for an engine configured with cfg;
// observer (nil drops them) receives its question events.
func NewHotEntries(cfg Config, observer Observer) (*HotEntries, error) {
	if observer == nil {
		observer = nopObserver{}
	}
	m := &HotEntries{e: &Engine{observer: observer, epoch: time.Now(), upstreams: map[string]*upstream{}}}
	m.e.questionIDs.Store(mirrorQuestionIDs)
	if err := m.Reconfigure(cfg); err != nil {
		return nil, err
	}
	return m, nil
}

// Suspend stops the mirror answering and taking records until the next
// Reconfigure: the host calls it before it reloads the engine, whose
// records may then come under either configuration.
func (m *HotEntries) Suspend() {
	m.taking.Store(false)
	m.cache.Store(nil)
}

// Reconfigure takes the engine's new configuration, the one a reload
// just gave it, and empties the mirror: the engine publishes its entries
// again under it (a new routes generation). Reconfigured to a
// configuration the engine already ran (a refused reload), the mirror
// stays empty of those entries until they are stored anew. On error the
// mirror stays suspended.
func (m *HotEntries) Reconfigure(cfg Config) error {
	cfg = cfg.withDefaults()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.Suspend()
	r, err := buildRoutes(cfg, newUpstream)
	if err != nil {
		return fmt.Errorf("hot entries: %w", err)
	}
	if cfg.Cache.MaxEntries > 0 {
		m.cache.Store(newMirrorCache(cfg.Cache.MaxEntries, r))
		m.taking.Store(true)
	}
	return nil
}

func newMirrorCache(size int, r *routes) *mirrorCache {
	clock := &fedClock{start: time.Now()}
	c := otter.Must(&otter.Options[cacheKey, mirrored]{
		MaximumSize: size,
		// Kept until it is no longer servable: its TTL, or its prefetch
		// window's start.
		ExpiryCalculator: otter.ExpiryWritingFunc(func(e otter.Entry[cacheKey, mirrored]) time.Duration {
			en, end := e.Value.en, e.Value.en.ttl
			if e.Value.prefetch {
				end = end * 9 / 10
			}
			return en.stored.Add(end).Sub(clock.time())
		}),
		Clock:    clock,
		Executor: func(fn func()) { fn() }, // as answerCache: no goroutine
	})
	return &mirrorCache{entries: c, routes: r, clock: clock}
}

// Publish takes one record PublishHotEntries handed out; a record for a key
// the mirror holds replaces its entry. Dropped while suspended. The
// entry ages by the mirror's monotonic clock from the age the engine
// read at publication (parseHitRecord: it is younger than the engine's
// by the record's delivery delay).
func (m *HotEntries) Publish(record []byte) error {
	now := time.Now() // the entry's age counts back from here
	key, en, prefetch, err := parseHitRecord(record, now)
	if err != nil {
		return err
	}
	c := m.cache.Load()
	if c == nil || !m.taking.Load() {
		return nil
	}
	if !(mirrored{en, prefetch}).servable(now) {
		return nil
	}
	c.clock.observe(now)
	c.entries.Set(key, mirrored{en: en, prefetch: prefetch})
	c.any.Store(true)
	return nil
}

// Len is the number of entries the mirror holds.
func (m *HotEntries) Len() int {
	if c := m.cache.Load(); c != nil {
		return c.entries.EstimatedSize()
	}
	return 0
}

// Counters are the mirror's totals: its hits, as its engine counts them.
func (m *HotEntries) Counters() Counters { return m.e.counters.snapshot() }

// AnswerNow is the engine's AnswerNow for a question a published entry
// answers: use it before asking the engine, on the goroutine that read
// the request. It appends the client's reply to dst, with the engine's
// counters and question event; else it reports false, having done
// nothing. Whatever else the engine may answer at once (a local
// name, an entry not published, stale or in its prefetch window) it
// leaves to the engine, as it does search candidates, forwarded ECS and
// compressed question names. miss is not read or filled.
func (m *HotEntries) AnswerNow(query, dst []byte, trace *Trace, _ *Miss) (resp Response, ok bool) {
	c := m.cache.Load()
	if c == nil || !c.any.Load() {
		return
	}
	return m.e.readImmediate(c.routes, query, dst, trace, nil, c)
}

// hit is the engine's immediate for the mirror: a published entry for
// the name as asked, routed where the engine would route it, that is
// still servable. Local names never reach the engine's cache, so they
// have no entry here either.
func (c *mirrorCache) hit(qn *question, r *found) bool {
	if !qn.cacheMayAnswer() {
		return false
	}
	key := keyFor(&qn.client, qn.client.name)
	e, found := c.entries.GetEntryQuietly(key)
	if !found {
		return false
	}
	now := time.Now()
	// The scope test guards against a record of an older configuration
	// (the mirror is emptied on reload); the engine's cache key has no
	// scope, so an entry fetched for a search candidate elsewhere is
	// left to the engine too.
	if e.Value.en.scope != qn.scope.name || !e.Value.servable(now) {
		return false
	}
	c.clock.observe(now)
	if qn.client.borrowed && qn.client.lower && key.name == qn.client.name {
		qn.client.name, qn.client.borrowed = e.Key.name, false // as answerCache's getKeyed
	}
	qn.start = now
	r.en, r.at, r.result, r.cacheHit = e.Value.en, now, ResultLocal, true
	r.ends = hitEndsAtLookup
	qn.e.counters.cacheHits.Add(1)
	return true
}
