package engine

import (
	"context"
	"time"
)

// Prefetch. An entry asked for at least CacheConfig.PrefetchMinHits times
// during its life (the question that fetched it counts) and asked again in
// the last tenth of its TTL is asked upstream once more in the
// background, so a popular name does not expire under its clients. The
// prefetch is a question like any other for the engine's rules (attempts,
// transaction timeout, ceiling, demotion), except that it has no client:
// a ceiling refusal is not counted as a client's refusal, and no client
// waits for it. It runs as the flight for its key, so clients that miss
// once the entry has expired join it instead of asking again.

// prefetchDue counts one more question answered by en at now, and reports
// whether it is the one that starts en's prefetch: en was asked minHits
// times before, less than a tenth of its TTL is left, and no prefetch was
// started for it. Once the count reaches minHits it is only read, so a
// popular entry's hits do not contend on it.
func (en *entry) prefetchDue(now time.Time, minHits int) bool {
	if int(en.asks.Load()) < minHits {
		en.asks.Add(1)
		return false
	}
	return 10*now.Sub(en.stored) >= 9*en.ttl && en.prefetched.CompareAndSwap(false, true)
}

// prefetch asks key upstream in the background for qn's routes and scope,
// and caches what comes back. Nothing is done when a flight already asks
// it.
func (qn *question) prefetch(key cacheKey) {
	rt := qn.routes
	fl, leads := rt.flights.join(key, nil)
	if !leads {
		fl.release()
		return
	}
	e := qn.e
	cq := clientQuery{rd: true, cd: key.cd, do: key.do, opt: true, name: key.name, qtype: key.qtype, qclass: key.qclass}
	p := &question{e: e, ctx: context.Background(), cfg: qn.cfg, routes: rt, client: cq,
		id: e.questionIDs.Add(1), scope: qn.scope, start: time.Now(), background: true}
	p.setBudget(p.start)
	e.counters.prefetches.Add(1)
	go func() {
		var r found
		p.lead(key.name, key, fl, false, &r)
		p.release()
		e.counters.prefetched[r.result].Add(1)
	}()
}
