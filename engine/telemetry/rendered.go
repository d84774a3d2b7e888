package telemetry

import (
	"context"
	"sync/atomic"

	"github.com/rs/zerolog"
)

// Pre-rendered fields. Most of an "attempt" or "question" event's fields
// take few values (level, message, scope, server, transport, qtype,
// outcome, rcode, ...): the observer encodes each combination once, as
// the context of a zerolog child logger, and an event copies those bytes
// instead of encoding the fields again. Only the fields that change with
// every question (its id, name, times, trace) are encoded per event.
//
// A combination's logger depends on nothing but the fields it holds, so an
// entry never goes stale: a reload's new scope or server makes new
// combinations, and the old ones are overwritten as the slots are needed.

// renderSlots is the number of combinations kept; a combination whose
// slot another holds is rendered again (once, into that slot).
const renderSlots = 512

// renderKey is a combination of an event's slowly changing fields.
type renderKey interface {
	comparable
	// hash mixes the combination's fields.
	hash() uint64
	// render writes the combination's fields into a logger's context.
	render(zerolog.Context) zerolog.Context
}

// renderCache maps combinations to their loggers: a table of slots read
// without locks, each holding the last combination that hashed there.
type renderCache[K renderKey] struct {
	base  zerolog.Logger
	slots [renderSlots]atomic.Pointer[rendered[K]]
}

type rendered[K renderKey] struct {
	key K
	log zerolog.Logger
	// prefix is what log writes before an event's own fields: "{" and
	// the context, without the closing "}" (nil if it could not be read).
	// The observer appends an event to a BatchWriter's batch from it.
	prefix []byte
}

func newRenderCache[K renderKey](base zerolog.Logger) *renderCache[K] {
	return &renderCache[K]{base: base}
}

// get returns the rendering of k's fields: the logger whose context holds
// them, and the bytes it writes for them.
func (c *renderCache[K]) get(k K) *rendered[K] {
	slot := &c.slots[k.hash()%renderSlots]
	if r := slot.Load(); r != nil && r.key == k {
		return r
	}
	r := &rendered[K]{key: k, log: k.render(c.base.With().Ctx(ownTime)).Logger()}
	r.prefix = contextBytes(r.log)
	slot.Store(r)
	return r
}

// contextBytes is what log (one of the cache's loggers) writes for its
// context: an empty event at NoLevel, as zerolog itself writes it, less
// the closing "}" and newline. Nil when log writes nothing (the level is
// off) or something else.
func contextBytes(log zerolog.Logger) []byte {
	var out captured
	l := log.Output(&out).With().Ctx(ownTime).Logger() // Output keeps hooks, not the Go context
	l.Log().Send()
	if len(out) <= len("{}\n") || out[0] != '{' || out[len(out)-2] != '}' || out[len(out)-1] != '\n' {
		return nil
	}
	return out[: len(out)-2 : len(out)-2]
}

// captured keeps what is written to it.
type captured []byte

func (c *captured) Write(p []byte) (int, error) {
	*c = append(*c, p...)
	return len(p), nil
}

// ownTime marks the observer's loggers: their events carry the time the
// engine read as the attempt or question ended, so timestampHook leaves
// them alone instead of reading the clock again.
var ownTime context.Context = observerTime{context.Background()}

type observerTime struct{ context.Context }

func hasOwnTime(e *zerolog.Event) bool {
	_, ok := e.GetCtx().(observerTime)
	return ok
}

// mix folds v into h (a multiply-xorshift step, as in splitmix64).
func mix(h, v uint64) uint64 {
	h ^= v
	h *= 0xbf58476d1ce4e5b9
	return h ^ h>>31
}

// hashString is FNV-1a of s: names from the configuration, short and not
// chosen by clients.
func hashString(s string) uint64 {
	h := uint64(0xcbf29ce484222325)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * 0x100000001b3
	}
	return h
}
