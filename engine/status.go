package engine

import "time"

// Status is a snapshot of the engine for operators.
type Status struct {
	Scopes          []ScopeStatus `json:"scopes"`
	FallbackServers []string      `json:"fallback_servers"`
	Counters        Counters      `json:"counters"`
	InFlight        int64         `json:"in_flight"`
	InFlightCeiling int64         `json:"in_flight_ceiling"`
	// UpstreamSockets is the pooled UDP sockets held between
	// transactions, across servers: descriptors that go when the
	// servers are at rest (pool.go).
	UpstreamSockets int `json:"upstream_sockets"`
}

// ScopeStatus is one scope and its servers' demotion state.
type ScopeStatus struct {
	Name    string         `json:"name"`
	Domains []string       `json:"domains"`
	Servers []ServerStatus `json:"servers"`
}

// ServerStatus is one server of a scope. DemotedUntil is set only while
// Demoted.
type ServerStatus struct {
	Address      string     `json:"address"`
	Demoted      bool       `json:"demoted"`
	DemotedUntil *time.Time `json:"demoted_until,omitempty"`
	// Recent are the outcomes of its latest attempts, oldest first.
	Recent []string `json:"recent"`
	// PooledSockets is its idle pooled UDP sockets.
	PooledSockets int `json:"pooled_sockets"`
	// Cookie says the server returned a server cookie (RFC 7873) that
	// the engine sends back; CaseNotKept that it was found not to keep
	// the question's case and is asked in lower case (0x20 off for it).
	Cookie      bool `json:"cookie"`
	CaseNotKept bool `json:"case_not_kept,omitempty"`
	// Transport is how it is asked: "udp" (UDP, then TCP after a
	// truncated reply), "dot" or "doh".
	Transport string `json:"transport"`
	// Connections are an encrypted server's connections; nil for a
	// plain one.
	Connections *ConnStatus `json:"connections,omitempty"`
}

// ConnStatus is an encrypted server's connections: how many are open now,
// and since the start how many were opened (each a handshake), how many
// of those resumed a TLS session, how many queries went on a connection
// already open, and how many connects or handshakes failed.
type ConnStatus struct {
	Open       int    `json:"open"`
	Handshakes uint64 `json:"handshakes"`
	Resumed    uint64 `json:"resumed"`
	Reused     uint64 `json:"reused"`
	Failed     uint64 `json:"failed"`
}

// add sums b into c.
func (c *ConnStatus) add(b *ConnStatus) {
	c.Open += b.Open
	c.Handshakes += b.Handshakes
	c.Resumed += b.Resumed
	c.Reused += b.Reused
	c.Failed += b.Failed
}

// connStatus is u's connections, nil for a plain server.
func (e *Engine) connStatus(u *upstream) *ConnStatus {
	st := u.enc
	if st == nil {
		return nil
	}
	cs := &ConnStatus{Handshakes: st.handshakes.Load(), Resumed: st.resumed.Load(),
		Reused: st.reused.Load(), Failed: st.failures.Load()}
	if u.ep.Transport == DoT {
		cs.Open = st.openConns()
	} else if s, ok := e.network.(ConnStatser); ok {
		cs.Open = s.OpenConnections(&u.ep)
	}
	return cs
}

// ServerConnections is the connections of every encrypted server the
// configuration lists, by its name (Endpoint.String()), for /metrics.
func (e *Engine) ServerConnections() map[string]ConnStatus {
	r := e.routes.Load()
	out := map[string]ConnStatus{}
	for _, s := range append(append([]*scope(nil), r.scopes...), r.fallback) {
		for _, u := range s.servers {
			if cs := e.connStatus(u); cs != nil {
				out[u.key] = *cs
			}
		}
	}
	return out
}

// Status reports the scopes with their servers' demotion at this moment;
// the fallback servers are listed without it.
func (e *Engine) Status() Status {
	r := e.routes.Load()
	now := e.now()
	st := Status{
		Counters:        e.counters.snapshot(),
		InFlight:        e.inFlight.n.Load(),
		InFlightCeiling: e.inFlight.ceiling.Load(),
		UpstreamSockets: e.IdleSockets(),
	}
	for _, s := range r.scopes {
		ss := ScopeStatus{Name: s.name, Domains: s.domains, Servers: []ServerStatus{}}
		for _, u := range s.servers {
			sv := ServerStatus{Address: u.key, Recent: u.recentList(), PooledSockets: u.idleSockets(),
				Cookie: u.cookie.known(), CaseNotKept: u.caseless.Load(),
				Transport: u.transportFor(e.first).String(), Connections: e.connStatus(u)}
			if until := u.markUntil(); demotedAt(until, now) {
				t := e.epoch.Add(until)
				sv.Demoted, sv.DemotedUntil = true, &t
			}
			ss.Servers = append(ss.Servers, sv)
		}
		st.Scopes = append(st.Scopes, ss)
	}
	st.FallbackServers = []string{}
	for _, u := range r.fallback.servers {
		st.FallbackServers = append(st.FallbackServers, u.key)
	}
	return st
}

// Counters returns the engine's totals.
func (e *Engine) Counters() Counters { return e.counters.snapshot() }

// InFlight returns the number of upstream transactions outstanding.
func (e *Engine) InFlight() int64 { return e.inFlight.n.Load() }

// MergeStatuses folds the statuses of several engines that run the same
// configuration (the instances of an edge host) into one: the scopes of
// the first, a server shown demoted when any engine has it demoted (until
// the latest mark) and with a cookie or not keeping case when any engine
// found so, and the sums of the counters, in-flight numbers, ceilings and
// pooled sockets.
func MergeStatuses(all []Status) Status {
	if len(all) == 0 {
		return Status{Scopes: []ScopeStatus{}, FallbackServers: []string{}, Counters: (&counters{}).snapshot()}
	}
	out := all[0]
	out.Scopes = cloneScopes(all[0].Scopes)
	out.Counters = Counters{}
	out.InFlight, out.InFlightCeiling, out.UpstreamSockets = 0, 0, 0
	for i, st := range all {
		out.Counters.Add(st.Counters)
		out.InFlight += st.InFlight
		out.InFlightCeiling += st.InFlightCeiling
		out.UpstreamSockets += st.UpstreamSockets
		if i == 0 {
			continue
		}
		for si := range min(len(out.Scopes), len(st.Scopes)) {
			mine, theirs := out.Scopes[si].Servers, st.Scopes[si].Servers
			for vi := range min(len(mine), len(theirs)) {
				pooled := mine[vi].PooledSockets + theirs[vi].PooledSockets
				cookie, caseless := mine[vi].Cookie || theirs[vi].Cookie, mine[vi].CaseNotKept || theirs[vi].CaseNotKept
				if t := theirs[vi]; t.Demoted && (!mine[vi].Demoted || t.DemotedUntil.After(*mine[vi].DemotedUntil)) {
					mine[vi] = t
				}
				var conns *ConnStatus
				if mine[vi].Connections != nil || theirs[vi].Connections != nil {
					conns = &ConnStatus{}
					for _, c := range []*ConnStatus{mine[vi].Connections, theirs[vi].Connections} {
						if c != nil {
							conns.add(c)
						}
					}
				}
				mine[vi].PooledSockets, mine[vi].Cookie, mine[vi].CaseNotKept = pooled, cookie, caseless
				mine[vi].Connections = conns
			}
		}
	}
	return out
}

// cloneScopes copies the server lists MergeStatuses writes to.
func cloneScopes(in []ScopeStatus) []ScopeStatus {
	out := make([]ScopeStatus, len(in))
	for i, s := range in {
		s.Servers = append([]ServerStatus(nil), s.Servers...)
		out[i] = s
	}
	return out
}
