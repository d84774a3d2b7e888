package engine

import (
	"strings"
	"time"

	"github.com/dohfwd/dohfwd/engine/dnswire"
)

// candidates appends to dst the names a question is asked as:
// for a single-label name routed to a scope with search domains, the name
// under each search domain in order, then the name itself; any other name
// only as given. A candidate too long to be a name (over 255 octets) is
// skipped.
func candidates(dst []string, name string, search []string) []string {
	if len(search) > 0 && dnswire.CountLabel(name) == 1 {
		for _, d := range search {
			c := name + d
			if _, ok := dnswire.IsDomainName(c); ok {
				dst = append(dst, c)
			}
		}
	}
	return append(dst, name)
}

// found is how a candidate, or the whole question, was answered inside
// the engine, before the client's reply is written: from an entry (an
// upstream answer, fresh or cached, read at the time at), or a message
// made here (local names, a search candidate's CNAME: reply, ID 0), or
// neither (unavailable, cancelled: see reason).
type found struct {
	result   Result
	reason   Reason
	cacheHit bool
	shared   bool // from an identical question's flight: no attempt of its own
	en       *entry
	at       time.Time
	reply    []byte
	// ends says at is the question's last clock reading: the end of
	// its own last transaction, a follower's wake-up, or as WebAssembly
	// an immediate cache hit's lookup (hitEndsAtLookup). After it only
	// the engine's own work on the reply (its entry, the cache, the
	// client's reply) happens, so it is Response.Answered without
	// reading the clock again (two host calls as WebAssembly).
	ends bool
}

// rcode is the found answer's rcode, or -1 without one.
func (f *found) rcode() int {
	switch {
	case f.en != nil:
		return int(f.en.msg[3] & 0x0F)
	case f.reply != nil:
		return int(f.reply[3] & 0x0F)
	}
	return -1
}

// isNXDomain reports whether f says the name does not exist, from upstream
// or from the cache.
func isNXDomain(f *found) bool {
	return (f.result == ResultNXDomain || f.result == ResultLocal || f.result == ResultStale) && f.rcode() == dnswire.RcodeNameError
}

// isAnswer reports whether f carries a NOERROR reply (NODATA included).
func isAnswer(f *found) bool {
	return (f.result == ResultAnswer || f.result == ResultLocal || f.result == ResultStale) && f.rcode() == dnswire.RcodeSuccess
}

// viaCandidate is f, the answer for a search candidate, as the reply for
// the name the client asked: a CNAME from asked to candidate first, then
// the candidate's records. The CNAME lives no longer than the answer it
// leads to. This path copies the records into a new message: it is rare.
func (qn *question) viaCandidate(f found, asked, candidate string) found {
	src := f.reply
	if src == nil {
		padded := qn.client.padded
		qn.client.padded = false // padded once, when the client's reply is written
		src = qn.appendEntry(nil, &f, nil)
		qn.client.padded = padded
	}
	if m, ok := candidateReply(src, &qn.client, asked, candidate); ok {
		f.reply, f.en = m, nil
		return f
	}
	return found{result: ResultUnavailable, reason: ReasonAttemptsSpent}
}

// candidateReply is src, a reply for candidate, made the reply for the
// client's question (asked): the header of src, the client's question,
// a CNAME from asked to candidate with the answer's TTL, then every
// record of src.
func candidateReply(src []byte, cq *clientQuery, asked, candidate string) ([]byte, bool) {
	w, ok := walkReply(src, nil)
	if !ok {
		return nil, false
	}
	ttl, _ := answerTTL(w.facts)
	target, err := dnswire.PackName(nil, candidate)
	if err != nil {
		return nil, false
	}
	p, _ := dnswire.NewParser(src)
	qname := cq.qname
	if asked != cq.name {
		if qname, err = dnswire.PackName(nil, asked); err != nil {
			return nil, false
		}
	}
	b := dnswire.NewBuilder(make([]byte, 0, len(src)+len(qname)+len(target)+dnswire.RRFixedLen+2), p.Header())
	b.Question(qname, cq.qtype, cq.qclass)
	b.NameRR(dnswire.SectionAnswer, qname, dnswire.TypeCNAME, dnswire.ClassINET, ttl, target)
	for {
		rr, more := p.Next()
		if !more {
			break
		}
		if err := b.CopyRR(rr.Section, src, rr); err != nil {
			return nil, false
		}
	}
	m, err := b.Finish()
	return m, err == nil && p.Err() == nil
}

// resolve runs the question: a local answer (RFC 6761 names, static
// hosts, the cache) if the name
// is the engine's own; else each candidate in order, from the cache or
// upstream, until one has an answer. NXDOMAIN moves to the next candidate
// without spending an attempt; failures share the question's attempts.
// It writes the result into r, the caller's zero value: resolve, lookup,
// lead, askUpstream and ask fill one found in place, as WebAssembly a
// found returned by value is a zeroing and copies (host memmove calls)
// at each level.
func (qn *question) resolve(r *found) {
	rt, asked := qn.routes, qn.client.name
	if m := rt.local.answer(&qn.client, asked); m != nil {
		r.reply, r.result = m, ResultLocal
		return
	}
	// Before the ceiling is looked at, and not a refusal.
	if len(qn.scope.servers) == 0 {
		*r = qn.noServers(asked)
		return
	}
	var buf [4]string
	names := candidates(buf[:0], asked, qn.scope.search)
	for i, name := range names {
		searched := i < len(names)-1
		if i > 0 {
			*r = found{} // the last candidate's NXDOMAIN
		}
		qn.lookup(name, searched, r)
		if searched && isNXDomain(r) {
			continue
		}
		if searched && isAnswer(r) {
			*r = qn.viaCandidate(*r, asked, name)
		}
		if r.cacheHit {
			qn.e.counters.cacheHits.Add(1)
		}
		return
	}
	panic("unreachable: the name as given is always a candidate")
}

// lookup answers one candidate: locally, from the cache, by joining the
// flight already asking it, or by asking upstream. searched says name is a
// search candidate, whose NXDOMAIN moves on and spends nothing. r is the
// caller's zero value (see resolve).
func (qn *question) lookup(name string, searched bool, r *found) {
	rt := qn.routes
	if searched {
		if m := rt.local.answer(&qn.client, name); m != nil {
			r.reply, r.result = m, ResultLocal
			return
		}
	}
	if qn.scope.forwardECS && qn.client.ecs {
		qn.askUpstream(name, searched, r)
		return
	}
	key := keyFor(&qn.client, name)
	if qn.scope.ecsAdd {
		var ok bool
		if key, ok = qn.subnetKey(key, r); ok {
			return
		}
	}
	if fl := qn.led; fl != nil {
		// Begun by JoinFlight, which found no entry: lead checks the
		// cache again.
		qn.led = nil
		qn.lead(name, key, fl, searched, r)
		return
	}
	for {
		stale, ok := qn.cached(key, r)
		if ok {
			return
		}
		fl, leads := rt.flights.join(key, qn.trace)
		if stale != nil {
			if f, ok := qn.withStale(name, key, fl, leads, searched, stale); ok {
				*r = f
				return
			}
			continue
		}
		if leads {
			qn.lead(name, key, fl, searched, r)
			return
		}
		if f, ok := qn.follow(fl, nil); ok {
			*r = f
			return
		}
		// The leader's client went away: ask again, perhaps as leader.
	}
}

// cached returns the cache's answer for key, if any. Hits spend no attempt
// and ignore the ceiling. Without a live answer, stale is the entry a
// stale answer may come from, if any. A hit is written into r (the
// caller's zero value, see resolve); a miss leaves r as it is.
func (qn *question) cached(key cacheKey, r *found) (stale *entry, ok bool) {
	c := qn.routes.cache
	if c == nil {
		return nil, false
	}
	// The question's start is recent enough for a TTL in whole seconds,
	// and reading the clock again costs more than the rest of a hit.
	now := qn.start
	en, stored, live := c.getKeyed(key, now)
	if qn.client.borrowed && qn.client.lower && stored != "" && key.name == qn.client.name {
		// The name as asked, lower case: the cache's string of it is
		// the question's own, without a copy of the borrowed one.
		qn.client.name, qn.client.borrowed, key.name = stored, false, stored
	}
	if !live {
		return qn.staleEntry(en, live), false
	}
	if c.conf.PrefetchMinHits > 0 && !qn.subnet.IsValid() && en.prefetchDue(now, c.conf.PrefetchMinHits) {
		if qn.client.borrowed { // the prefetch keeps the key
			qn.client.own()
			key.name = strings.Clone(key.name)
		}
		qn.prefetch(key)
	}
	if qn.e.publish != nil && !qn.subnet.IsValid() {
		qn.publishHit(key, en, now)
	}
	r.en, r.at, r.result, r.cacheHit = en, now, ResultLocal, true
	return nil, true
}

// lead asks name upstream for every question that joins fl, and caches the
// answer before the followers wake. r is the caller's zero value (see
// resolve).
func (qn *question) lead(name string, key cacheKey, fl *flight, searched bool, r *found) {
	fl.abandoned, fl.leaderID = true, qn.id // until a result is set: a panic below must not strand the followers
	defer qn.land(key, fl)
	// The previous flight may have cached its answer between this
	// question's miss and its join. (A prefetch asks while the entry is
	// still live: that is its point.)
	// A question StartMiss began has sent its query, having looked in
	// the cache just before.
	if !qn.background && qn.first == nil {
		if _, ok := qn.cached(key, r); ok {
			fl.entry, fl.result, fl.abandoned = r.en, r.en.result, false
			return
		}
	}
	qn.setFlight(key, fl, qn.askUpstream(name, searched, r), r)
}

// setFlight sets the flight fl the question led for key to its result r, with
// the entry en for an answer or NXDOMAIN, which goes into the cache.
func (qn *question) setFlight(key cacheKey, fl *flight, en *entry, r *found) {
	fl.entry, fl.result, fl.reason, fl.abandoned = en, r.result, r.reason, abandons(r)
	fl.spent, fl.upstream = int32(qn.spent), qn.upstream
	if en == nil {
		fl.tried = qn.tried // the leader adds no more once landed
	}
	if c := qn.routes.cache; en != nil && c != nil {
		if qn.subnetShared {
			key = sharedKey(key)
		}
		c.put(key, en)
	}
}

// land ends the flight fl the question led for key: later questions
// start a new one (or find the cache), its followers wake and its
// waiters are answered, and the question notes whom it served.
func (qn *question) land(key cacheKey, fl *flight) {
	rt := qn.routes
	var held *entry // not to be shared as it is (replyEntry)
	if qn.held != nil {
		held = &qn.held.entry
	}
	ws := rt.flights.land(key, fl, held)
	// Landed, the flight takes no more followers.
	if len(ws) > 0 {
		rt.flights.answer(fl, ws)
	}
	if len(fl.served) > 0 {
		if qn.shared == nil {
			qn.shared = new(sharedTraces)
		}
		qn.shared.serve(fl.served)
	}
	fl.release()
}

// follow waits for fl and returns its result for this question, or false
// when the leader abandoned it. When staleAt fires first the question is
// unavailable for the client response timer (raceStale).
func (qn *question) follow(fl *flight, staleAt <-chan time.Time) (found, bool) {
	defer fl.release() // after the result is read from it
	var expired <-chan time.Time
	if qn.budgetBy == budgetQuestion && !qn.budgetEnd.IsZero() {
		t := time.NewTimer(time.Until(qn.budgetEnd))
		defer t.Stop()
		expired = t.C
	}
	if expired == nil && staleAt == nil {
		// The usual follower: a select of two cases costs the runtime
		// half the channel locking and queueing of four (nil channels
		// included), which is most of a follower's time as WebAssembly.
		select {
		case <-fl.done:
		case <-qn.ctx.Done():
			return qn.ended(), true
		}
	} else {
		select {
		case <-fl.done:
		case <-qn.ctx.Done():
			return qn.ended(), true
		case <-expired:
			return qn.ended(), true
		case <-staleAt:
			return found{result: ResultUnavailable, reason: ReasonStaleTimer}, true
		}
	}
	if fl.abandoned {
		return found{}, false
	}
	own := fl.leaderID == qn.id
	qn.joined(fl, own)
	if own {
		qn.spent, qn.upstream = int(fl.spent), fl.upstream
	}
	if fl.entry == nil {
		// Unavailable: Resolve writes the client's SERVFAIL, naming
		// the leader's attempts (read only from here on).
		qn.tried = fl.tried
		return found{result: fl.result, reason: fl.reason, shared: !own}, true
	}
	return found{en: fl.entry, at: time.Now(), result: fl.entry.result, shared: !own, ends: true}, true
}

// joined records the traces a question that waited for fl shared it with:
// the leader's; or, when the leader was its own detached copy (own, see
// raceStale), the traces that copy served. fl has landed: no more are
// added. Not inlined: follow's frame stays as it was.
//
//go:noinline
func (qn *question) joined(fl *flight, own bool) {
	switch {
	case own && len(fl.served) > 0:
		if qn.shared == nil {
			qn.shared = new(sharedTraces)
		}
		qn.shared.serve(fl.served)
	case !own && fl.hasLeader:
		if qn.shared == nil {
			qn.shared = new(sharedTraces)
		}
		qn.shared.joinedTrace = fl.leader
		qn.shared.joined = &qn.shared.joinedTrace
	}
}

// askUpstream asks name through the attempt loop and, for an answer or
// NXDOMAIN, makes the entry the reply is written from. searched refunds
// the attempt of an NXDOMAIN: it moves the question on, it is not a
// failure. r is the caller's zero value (see resolve).
func (qn *question) askUpstream(name string, searched bool, r *found) *entry {
	var res exchangeResult
	var en *entry
	qn.ask(name, &res, r, &en)
	return qn.answerEntry(searched, &res, en, r)
}

// answerEntry makes the entry of the candidate r, asked upstream, for
// an answer or NXDOMAIN: en, the reply's, filled from its walk in res
// (see askUpstream); nil for any other result.
func (qn *question) answerEntry(searched bool, res *exchangeResult, en *entry, r *found) *entry {
	if r.result != ResultAnswer && r.result != ResultNXDomain {
		return nil
	}
	if r.result == ResultNXDomain && searched {
		qn.spent--
	}
	if qn.subnet.IsValid() {
		qn.subnetShared = scopePrefixZero(res.walked.optData)
	}
	r.en = makeEntry(en, &res.walked, r.result, &qn.routes.cfg.Cache, r.at) // r.at: when the reply came
	r.en.scope = qn.scope.name
	return r.en
}
