package engine

import (
	"errors"
	"time"

	"github.com/dohfwd/dohfwd/engine/dnswire"
)

// Explanation says what a question would do at this moment, without
// asking anyone: the scope and why, the candidates with their local,
// cache and flight state, the servers in the order the next attempt would
// see them, and the ceiling. It is built by the rule functions the
// question path uses (routeFor, candidates, serverOrder, chooseServer,
// refusedAt), so it cannot disagree with what a question does.
type Explanation struct {
	Name  string `json:"name"`
	Type  string `json:"type"`
	Scope string `json:"scope"`
	// Route is how the scope was chosen: "routing domain", "default
	// route" or "fallback"; Domain the routing domain that matched.
	Route  string `json:"route"`
	Domain string `json:"domain,omitempty"`
	Why    string `json:"why"`
	// Local is set when the name is answered by the engine itself
	// (RFC 6761 names, hosts): nothing else below applies.
	Local      bool                   `json:"local"`
	Candidates []CandidateExplanation `json:"candidates"`
	Servers    []ServerExplanation    `json:"servers"`
	// Next is the server the next attempt would go to ("" without servers).
	Next            string `json:"next"`
	Attempts        int    `json:"attempts"` // the question's attempt budget
	InFlight        int64  `json:"in_flight"`
	InFlightCeiling int64  `json:"in_flight_ceiling"`
	// CeilingRefuses is set when an upstream attempt would be refused now.
	CeilingRefuses bool `json:"ceiling_refuses"`
	// Outcome is what the question would do first, in words.
	Outcome string `json:"outcome"`
}

// CandidateExplanation is one name the question would be asked as.
type CandidateExplanation struct {
	Name  string `json:"name"`
	Local bool   `json:"local"`
	// Cached is the cache's entry: "answer" or "nxdomain"; "" for none.
	Cached       string  `json:"cached,omitempty"`
	TTLRemaining float64 `json:"ttl_remaining_s,omitempty"` // seconds
	// Stale is an expired entry (its result) that serve-stale would
	// answer with if the servers fail (or the client response timer runs
	// out); StaleRemaining is what is left of its stale window.
	Stale          string  `json:"stale,omitempty"`
	StaleRemaining float64 `json:"stale_remaining_s,omitempty"` // seconds
	// InFlight is set when an identical question is upstream now: this
	// one would wait for it and send nothing.
	InFlight bool `json:"in_flight"`
}

// ServerExplanation is one server of the scope, in the order the next
// attempt sees them.
type ServerExplanation struct {
	Address      string     `json:"address"`
	Demoted      bool       `json:"demoted"`
	DemotedUntil *time.Time `json:"demoted_until,omitempty"`
	Remaining    float64    `json:"demotion_remaining_s,omitempty"` // seconds
	Next         bool       `json:"next"`
}

// Explain explains the question of the wire query (one question, as
// Resolve takes it). Nothing is sent; the cache is read, not changed.
// It fails only for a query that does not read.
func (e *Engine) Explain(query []byte) (Explanation, error) {
	cq, ok := parseQuery(query)
	if !ok {
		if cq, ok = unpackedQuery(query); !ok {
			return Explanation{}, errors.New("engine: the query to explain does not read")
		}
	}
	return e.explain(cq), nil
}

func (e *Engine) explain(cq *clientQuery) Explanation {
	rt := e.routes.Load()
	now, mono := time.Now(), e.now()
	s, by, domain := rt.routeFor(cq.name)
	x := Explanation{
		Name: cq.name, Type: dnswire.TypeString(cq.qtype), Scope: s.name,
		Route: by.String(), Domain: domain, Attempts: rt.cfg.Attempts,
		InFlight: e.inFlight.n.Load(), InFlightCeiling: e.inFlight.ceiling.Load(),
		Candidates: []CandidateExplanation{}, Servers: []ServerExplanation{},
	}
	x.CeilingRefuses = refusedAt(x.InFlight, x.InFlightCeiling)
	switch by {
	case RouteByDomain:
		x.Why = "longest routing domain " + domain + " of scope " + s.name
	case RouteByDefault:
		x.Why = "no routing domain matches; first default-route scope with servers"
	default:
		x.Why = "no routing domain matches and no default-route scope has servers"
	}
	if rt.local.answer(cq, cq.name) != nil {
		x.Local = true
		x.Outcome = "answered locally (RFC 6761 name or hosts)"
		return x
	}

	until := make([]time.Duration, len(s.servers))
	for i, u := range s.servers {
		until[i] = u.markUntil()
	}
	order := serverOrder(make([]int, 0, len(s.servers)), until, mono)
	next := -1
	if len(order) > 0 {
		next = chooseServer(order, make([]bool, len(s.servers)), 0)
		x.Next = s.servers[next].key
	}
	for _, i := range order {
		sv := ServerExplanation{Address: s.servers[i].key, Next: i == next}
		if demotedAt(until[i], mono) {
			t := e.epoch.Add(until[i])
			sv.Demoted, sv.DemotedUntil, sv.Remaining = true, &t, (until[i] - mono).Seconds()
		}
		x.Servers = append(x.Servers, sv)
	}

	names := candidates(nil, cq.name, s.search)
	for i, name := range names {
		c := CandidateExplanation{Name: name}
		if i < len(names)-1 && rt.local.answer(cq, name) != nil {
			c.Local = true
		} else if rt.cache != nil {
			en, live := rt.cache.peek(keyFor(cq, name), now)
			switch {
			case live:
				c.Cached = en.result.String()
				c.TTLRemaining = en.stored.Add(en.ttl).Sub(now).Seconds()
			case en != nil && en.scope == s.name: // as staleEntry
				c.Stale = en.result.String()
				c.StaleRemaining = en.stored.Add(en.ttl + rt.cache.conf.StaleMax).Sub(now).Seconds()
			}
		}
		c.InFlight = rt.flights.flying(keyFor(cq, name))
		x.Candidates = append(x.Candidates, c)
	}

	first := x.Candidates[0]
	switch {
	case len(s.servers) == 0:
		x.Outcome = "unavailable at once: the scope has no servers"
	case first.Local:
		x.Outcome = "answered locally as " + first.Name
	case first.Cached != "":
		x.Outcome = "answered from the cache (" + first.Cached + ") as " + first.Name
	case first.InFlight:
		x.Outcome = "waits for the identical question upstream now; sends nothing"
	case x.CeilingRefuses:
		x.Outcome = "refused by the in-flight ceiling: unavailable"
	default:
		x.Outcome = "asks " + first.Name + " of " + x.Next + " over " + e.firstTransport().String()
	}
	if first.Stale != "" && first.Cached == "" && !first.Local && len(s.servers) > 0 {
		x.Outcome += "; the expired entry (" + first.Stale + ") answers stale if that fails"
		if rt.cfg.Cache.StaleAnswerAfter > 0 {
			x.Outcome += " or takes longer than " + rt.cfg.Cache.StaleAnswerAfter.String()
		}
	}
	return x
}

// firstTransport is the transport of an attempt that follows no
// truncated reply.
func (e *Engine) firstTransport() Transport { return e.first }

// flying reports whether a question for k is upstream now.
func (f *flights) flying(k cacheKey) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.find(k) != nil
}
