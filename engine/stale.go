package engine

import (
	"time"

	"github.com/dohfwd/dohfwd/engine/dnswire"
)

// Serve-stale (RFC 8767). An expired entry stays in the cache for
// CacheConfig.StaleMax. A question whose result would be unavailable
// (attempts spent, ceiling refusal, an empty scope, its own timeout) and
// that finds such an entry is answered from it: every record's TTL set
// to StaleTTL, its Cache-Control TTL StaleTTL (staleReplyTTL), and an
// EDE option with info-code 3 (Stale Answer) when the client sent EDNS
// (RFC 6891 section 7: no OPT record in a reply to a query without). The
// question still spends its attempts exactly as it would have: a stale
// answer is a local answer given after the upstream result is known, or,
// with the client response timer (StaleAnswerAfter, RFC 8767 §5), while
// the upstream question goes on under its own budget and refreshes the
// entry when it succeeds. Unavailable results are never stored, so the
// stale entry stays until an answer replaces it or its window ends.

// staleEDE is the EDNS option of a stale answer: EDE (RFC 8914) info-code
// 3, Stale Answer, without extra text.
var staleEDE = []byte{
	byte(dnswire.EDNS0EDE >> 8), byte(dnswire.EDNS0EDE & 0xFF), // option code
	0, 2, // length
	0, byte(dnswire.ExtendedErrorCodeStaleAnswer),
}

// appendStale appends cq's stale reply from en: as appendReply, but every
// record's TTL is ttl and the OPT record (when the client sent one)
// carries EDE 3.
func (en *entry) appendStale(dst []byte, cq *clientQuery, qname []byte, ttl time.Duration) []byte {
	return en.write(dst, cq, qname, time.Time{}, int64(ttl/time.Second))
}

// staleReplyTTL is the TTL of a reply whose answerTTL is ttl: itself, or
// for a stale answer (staleTTL >= 0) the stale TTL, which every record of
// it carries. A negative stale answer too: the SOA's MINIMUM bounds how
// long the upstream's denial may be kept (RFC 2308), but this reply is not
// that denial as the upstream gave it, it is what RFC 8767 lets stand in
// for one that cannot be had now, for the stale TTL (its records, its
// Cache-Control max-age), the same as a positive stale answer.
func staleReplyTTL(ttl uint32, cacheable bool, staleTTL int64) uint32 {
	if staleTTL >= 0 && cacheable {
		return uint32(staleTTL)
	}
	return ttl
}

// staleEntry is what the cache holds for key when it is only good for a
// stale answer to this question: expired within the stale window, and
// stored from this question's scope. Else nil.
func (qn *question) staleEntry(en *entry, live bool) *entry {
	if en == nil || live || en.scope != qn.scope.name {
		return nil
	}
	return en
}

// orStale is r, or the stale answer from stale when r is unavailable.
// The underlying reason stays in the result.
func (qn *question) orStale(r found, stale *entry) found {
	if stale == nil || r.result != ResultUnavailable {
		return r
	}
	return found{result: ResultStale, reason: r.reason, en: stale, at: qn.start}
}

// noServers is the result of a question routed to a scope without
// servers: unavailable, or stale from what the scope's servers gave
// before. Not inlined: every question's stack would carry its frame.
//
//go:noinline
func (qn *question) noServers(asked string) found {
	r := found{result: ResultUnavailable, reason: ReasonNoServers}
	rt := qn.routes
	if rt.cache != nil && !(qn.scope.forwardECS && qn.client.ecs) {
		r = qn.orStale(r, qn.staleEntry(rt.cache.get(keyFor(&qn.client, asked), qn.start)))
	}
	return r
}

// withStale is lookup's step for a question that has a stale entry: lead
// or follow fl, and answer stale if the result is unavailable, or, with
// the client response timer, when it runs out first (raceStale). It
// reports false when the flight was abandoned: ask again. Not inlined, so
// the common path's stack does not carry its frame.
//
//go:noinline
func (qn *question) withStale(name string, key cacheKey, fl *flight, leads, searched bool, stale *entry) (found, bool) {
	if qn.cfg.Cache.StaleAnswerAfter > 0 {
		return qn.raceStale(name, key, fl, leads, searched, stale)
	}
	if leads {
		var r found
		qn.lead(name, key, fl, searched, &r)
		return qn.orStale(r, stale), true
	}
	r, ok := qn.follow(fl, nil)
	if !ok {
		return found{}, false
	}
	return qn.orStale(r, stale), true
}

// raceStale answers a question that has a stale entry while the client
// response timer runs: the upstream question (led here, on its own
// goroutine, or already in flight) against the timer. The upstream
// question is detached from the client, so neither the timer nor the
// client going away ends it, and what it brings is cached. It reports
// false when the flight was abandoned: ask again.
func (qn *question) raceStale(name string, key cacheKey, fl *flight, leads, searched bool, stale *entry) (found, bool) {
	if leads {
		qn.routes.flights.awaited(fl)
		d := qn.detached()
		go func() {
			d.lead(name, key, fl, searched, new(found))
			d.release()
		}()
	}
	t := time.NewTimer(qn.cfg.Cache.StaleAnswerAfter - time.Since(qn.start))
	defer t.Stop()
	r, ok := qn.follow(fl, t.C)
	if !ok {
		return found{}, false
	}
	return qn.orStale(r, stale), true
}

// detached is a copy of qn that asks upstream on its own: no client
// deadline or cancellation (the question timeout still bounds it), and
// no reference to the client's query bytes, which the caller may reuse
// once it is answered. Events keep qn's id.
func (qn *question) detached() *question {
	cq := qn.client
	cq.raw, cq.qname = nil, nil
	ctx, trace := detachedContext(qn.ctx, qn.trace)
	d := &question{e: qn.e, ctx: ctx, cfg: qn.cfg, routes: qn.routes,
		client: cq, id: qn.id, scope: qn.scope, start: qn.start, trace: trace}
	d.setBudget(qn.start)
	return d
}

// keepStale copies into c the entries of prev that serve-stale may still
// use after a reload: within their stale window (c's StaleMax) and stored
// from a scope that still exists (scopeExists). They may have come from
// servers the new configuration no longer asks, so they are never live
// again: only a stale answer, or a refresh, uses them.
func (c *answerCache) keepStale(prev *answerCache, scopeExists func(string) bool) {
	if c.conf.StaleMax <= 0 {
		return
	}
	now := time.Now()
	c.clock.observe(now)
	for k, en := range prev.entries.All() {
		if !scopeExists(en.scope) || now.Sub(en.stored) >= en.ttl+c.conf.StaleMax {
			continue
		}
		kept := &entry{result: en.result, msg: en.msg, ttls: en.ttls, optData: en.optData,
			optClass: en.optClass, stored: en.stored, ttl: en.ttl, scope: en.scope, staleOnly: true,
			minPositive: en.minPositive, soaTTL: en.soaTTL, soaMinimum: en.soaMinimum, hasSOA: en.hasSOA, hasFacts: en.hasFacts}
		c.entries.Set(k, kept)
	}
}

// hasScope reports whether r has a scope named name (the fallback
// included).
func (r *routes) hasScope(name string) bool {
	if name == r.fallback.name {
		return true
	}
	for _, s := range r.scopes {
		if s.name == name {
			return true
		}
	}
	return false
}
