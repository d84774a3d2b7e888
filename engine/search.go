package engine

import (
	"time"

	"github.com/miekg/dns"
)

// candidates appends to dst the names a question is asked as (SPEC §1.4):
// for a single-label name routed to a scope with search domains, the name
// under each search domain in order, then the name itself; any other name
// only as given. A candidate too long to be a name (over 255 octets) is
// skipped.
func candidates(dst []string, name string, search []string) []string {
	if len(search) > 0 && dns.CountLabel(name) == 1 {
		for _, d := range search {
			c := name + d
			if _, ok := dns.IsDomainName(c); ok {
				dst = append(dst, c)
			}
		}
	}
	return append(dst, name)
}

// viaCandidate turns m, the client's reply for a search candidate, into
// the reply for the name the client asked: a CNAME from asked to candidate
// comes first, then the candidate's records. The CNAME lives no longer than
// the records it leads to.
func viaCandidate(m *dns.Msg, asked, candidate string) *dns.Msg {
	cname := &dns.CNAME{
		Hdr:    dns.RR_Header{Name: asked, Rrtype: dns.TypeCNAME, Class: dns.ClassINET, Ttl: shortestTTL(m)},
		Target: candidate,
	}
	answer := make([]dns.RR, 0, 1+len(m.Answer))
	m.Answer = append(append(answer, cname), m.Answer...)
	return m
}

// shortestTTL is the smallest TTL of m's answer records, or of its SOA for
// NODATA (RFC 2308), or 0.
func shortestTTL(m *dns.Msg) uint32 {
	if len(m.Answer) > 0 {
		ttl := m.Answer[0].Header().Ttl
		for _, rr := range m.Answer[1:] {
			ttl = min(ttl, rr.Header().Ttl)
		}
		return ttl
	}
	for _, rr := range m.Ns {
		if soa, ok := rr.(*dns.SOA); ok {
			return min(soa.Hdr.Ttl, soa.Minttl)
		}
	}
	return 0
}

// isNXDomain reports whether r says the name does not exist, from upstream
// or from the cache.
func isNXDomain(r Response) bool {
	switch r.Result {
	case ResultNXDomain:
		return true
	case ResultLocal:
		return r.Msg != nil && r.Msg.Rcode == dns.RcodeNameError
	}
	return false
}

// isAnswer reports whether r carries a NOERROR reply (NODATA included).
func isAnswer(r Response) bool {
	return (r.Result == ResultAnswer || r.Result == ResultLocal) && r.Msg != nil && r.Msg.Rcode == dns.RcodeSuccess
}

// resolve runs the question (SPEC §1.4, §1.5): a local answer if the name
// is the engine's own; else each candidate in order, from the cache or
// upstream, until one has an answer. NXDOMAIN moves to the next candidate
// without spending an attempt; failures share the question's attempts.
func (qn *question) resolve() Response {
	rt, asked := qn.routes, qn.client.Question[0].Name
	if m := rt.local.answer(qn.client, asked); m != nil {
		return Response{Msg: m, Result: ResultLocal}
	}
	// Before the ceiling is looked at, and not a refusal.
	if len(qn.scope.servers) == 0 {
		return Response{Result: ResultUnavailable, Reason: ReasonNoServers}
	}
	var buf [4]string
	names := candidates(buf[:0], asked, qn.scope.search)
	for i, name := range names {
		searched := i < len(names)-1
		r := qn.lookup(name, searched)
		if searched && isNXDomain(r) {
			continue
		}
		if searched && isAnswer(r) {
			r.Msg = viaCandidate(r.Msg, asked, name)
		}
		if r.CacheHit {
			qn.e.counters.cacheHits.Add(1)
		}
		return r
	}
	panic("unreachable: the name as given is always a candidate")
}

// lookup answers one candidate: locally, from the cache, by joining the
// flight already asking it, or by asking upstream. searched says name is a
// search candidate, whose NXDOMAIN moves on and spends nothing.
func (qn *question) lookup(name string, searched bool) Response {
	rt := qn.routes
	if searched {
		if m := rt.local.answer(qn.client, name); m != nil {
			return Response{Msg: m, Result: ResultLocal}
		}
	}
	if rt.cfg.ForwardECS && sendsECS(qn.client) {
		r, _ := qn.askUpstream(name, searched)
		return r
	}
	key := keyFor(qn.client, name)
	for {
		if r, ok := qn.cached(key); ok {
			return r
		}
		fl, leads := rt.flights.join(key, qn.trace)
		if leads {
			return qn.lead(name, key, fl, searched)
		}
		if r, ok := qn.follow(fl); ok {
			return r
		}
		// The leader's client went away: ask again, perhaps as leader.
	}
}

// cached returns the cache's answer for key, if any. Hits spend no attempt
// and ignore the ceiling.
func (qn *question) cached(key cacheKey) (Response, bool) {
	r, _ := qn.cachedEntry(key)
	return r, r.Msg != nil
}

func (qn *question) cachedEntry(key cacheKey) (Response, *entry) {
	c := qn.routes.cache
	if c == nil {
		return Response{}, nil
	}
	// The question's start is recent enough for a TTL in whole seconds,
	// and reading the clock again costs more than the rest of a hit.
	now := qn.start
	en := c.get(key, now)
	if en == nil {
		return Response{}, nil
	}
	return Response{Msg: en.reply(qn.client, now), Result: ResultLocal, CacheHit: true}, en
}

// lead asks name upstream for every question that joins fl, and caches the
// answer before the followers wake.
func (qn *question) lead(name string, key cacheKey, fl *flight, searched bool) Response {
	rt := qn.routes
	fl.abandoned = true // until a result is set: a panic below must not strand the followers
	defer func() {
		rt.flights.land(key, fl)
		// Landed, the flight takes no more followers.
		if len(fl.served) > 0 {
			if qn.shared == nil {
				qn.shared = new(sharedTraces)
			}
			qn.shared.served = append(qn.shared.served, fl.served...)
		}
	}()
	// The previous flight may have cached its answer between this
	// question's miss and its join.
	if r, en := qn.cachedEntry(key); en != nil {
		fl.entry, fl.result, fl.abandoned = en, Response{Result: en.result}, false
		return r
	}
	r, en := qn.askUpstream(name, searched)
	fl.entry, fl.result, fl.abandoned = en, Response{Result: r.Result, Reason: r.Reason}, abandons(r)
	if en == nil {
		fl.tried = qn.tried
	}
	if en != nil && rt.cache != nil {
		rt.cache.put(key, en)
	}
	return r
}

// follow waits for fl and returns its result for this question, or false
// when the leader abandoned it.
func (qn *question) follow(fl *flight) (Response, bool) {
	var expired <-chan time.Time
	if qn.budgetBy == budgetQuestion && !qn.budgetEnd.IsZero() {
		t := time.NewTimer(time.Until(qn.budgetEnd))
		defer t.Stop()
		expired = t.C
	}
	select {
	case <-fl.done:
	case <-qn.ctx.Done():
		return qn.ended(), true
	case <-expired:
		return qn.ended(), true
	}
	if fl.abandoned {
		return Response{}, false
	}
	if fl.leader != nil {
		if qn.shared == nil {
			qn.shared = new(sharedTraces)
		}
		qn.shared.joined = fl.leader
	}
	if fl.entry == nil {
		qn.tried = fl.tried
		r := fl.result
		r.Shared = true
		return r, true // unavailable: Resolve writes the client's SERVFAIL
	}
	return Response{Msg: fl.entry.reply(qn.client, time.Now()), Result: fl.entry.result, Shared: true}, true
}

// askUpstream asks name through the attempt loop and, for an answer or
// NXDOMAIN, makes the entry the reply is built from. searched refunds the
// attempt of an NXDOMAIN: it moves the question on, it is not a failure.
func (qn *question) askUpstream(name string, searched bool) (Response, *entry) {
	r := qn.ask(name)
	if r.Result != ResultAnswer && r.Result != ResultNXDomain {
		return r, nil
	}
	if r.Result == ResultNXDomain && searched {
		qn.spent--
	}
	now := time.Now()
	en := newEntry(r.Msg, r.Result, qn.routes.cfg.Cache, now)
	r.Msg = en.reply(qn.client, now)
	return r, en
}
