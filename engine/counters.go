package engine

import (
	"reflect"
	"sync/atomic"
)

// counters are the engine's running totals. Every field is updated with
// atomics on the question path.
type counters struct {
	upstreamFailed    atomic.Uint64
	refused           atomic.Uint64
	cancelled         atomic.Uint64
	mismatchedReplies atomic.Uint64
	attempts          [numOutcomes]atomic.Uint64
	questions         [numResults]atomic.Uint64
	cacheHits         atomic.Uint64
	probes            [numOutcomes]atomic.Uint64
	stale             [len(reasonNames)]atomic.Uint64 // stale answers by underlying reason
	prefetches        atomic.Uint64                   // prefetches started
	prefetched        [numResults]atomic.Uint64       // prefetches ended, by result
}

// Counters is a snapshot of the engine's totals.
type Counters struct {
	UpstreamFailed    uint64            `json:"upstream_failed"`
	Refused           uint64            `json:"refused"`
	Cancelled         uint64            `json:"cancelled"`
	MismatchedReplies uint64            `json:"mismatched_replies"`
	CacheHits         uint64            `json:"cache_hits"`
	Attempts          map[string]uint64 `json:"attempts"`  // by outcome
	Questions         map[string]uint64 `json:"questions"` // by result
	Probes            map[string]uint64 `json:"probes"`    // background probes by outcome
	// Stale counts stale answers (serve-stale) by the reason the question
	// was unavailable.
	Stale map[string]uint64 `json:"stale_answers"`
	// Prefetches counts prefetches started; PrefetchResults those ended,
	// by result (answer, nxdomain, unavailable).
	Prefetches      uint64            `json:"prefetches"`
	PrefetchResults map[string]uint64 `json:"prefetch_results"`
}

func (c *counters) snapshot() Counters {
	s := Counters{
		UpstreamFailed:    c.upstreamFailed.Load(),
		Refused:           c.refused.Load(),
		Cancelled:         c.cancelled.Load(),
		MismatchedReplies: c.mismatchedReplies.Load(),
		CacheHits:         c.cacheHits.Load(),
		Attempts:          make(map[string]uint64, numOutcomes),
		Questions:         make(map[string]uint64, numResults),
		Probes:            make(map[string]uint64, numOutcomes),
		Stale:             make(map[string]uint64, len(reasonNames)),
		Prefetches:        c.prefetches.Load(),
		PrefetchResults:   map[string]uint64{},
	}
	for r := ReasonAttemptsSpent; int(r) < len(reasonNames); r++ {
		s.Stale[r.String()] = c.stale[r].Load()
	}
	for _, r := range [...]Result{ResultAnswer, ResultNXDomain, ResultUnavailable} {
		s.PrefetchResults[r.String()] = c.prefetched[r].Load()
	}
	for o := Outcome(0); o < numOutcomes; o++ {
		s.Attempts[o.String()] = c.attempts[o].Load()
		s.Probes[o.String()] = c.probes[o].Load()
	}
	for r := Result(0); r < numResults; r++ {
		s.Questions[r.String()] = c.questions[r].Load()
	}
	return s
}

// Add adds d's totals to c, so that several engines (the instances of an
// edge host) report as one. c's maps are made as needed.
//
// It adds every field by its kind (a uint64 or a map[string]uint64), not
// by name: a counter added to Counters is summed, and so shown by an edge
// host's /status and /metrics as by dohfwd serve's, with no line here to
// forget (TestCountersAddSumsEveryField). It runs per admin request only.
func (c *Counters) Add(d Counters) {
	into, from := reflect.ValueOf(c).Elem(), reflect.ValueOf(d)
	for i := range into.NumField() {
		f, g := into.Field(i), from.Field(i)
		switch f.Interface().(type) {
		case uint64:
			f.SetUint(f.Uint() + g.Uint())
		case map[string]uint64:
			f.Set(reflect.ValueOf(addCounts(f.Interface().(map[string]uint64), g.Interface().(map[string]uint64))))
		default:
			panic("engine: Counters." + into.Type().Field(i).Name + " is neither a uint64 nor a map[string]uint64: Add cannot sum it")
		}
	}
}

func addCounts(into, from map[string]uint64) map[string]uint64 {
	if into == nil {
		into = make(map[string]uint64, len(from))
	}
	for k, v := range from {
		into[k] += v
	}
	return into
}
