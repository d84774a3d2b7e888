package engine

import "time"

// Status is a snapshot of the engine for operators.
type Status struct {
	Scopes          []ScopeStatus `json:"scopes"`
	FallbackServers []string      `json:"fallback_servers"`
	Counters        Counters      `json:"counters"`
	InFlight        int64         `json:"in_flight"`
	InFlightCeiling int64         `json:"in_flight_ceiling"`
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
	}
	for _, s := range r.scopes {
		ss := ScopeStatus{Name: s.name, Domains: s.domains, Servers: []ServerStatus{}}
		for _, u := range s.servers {
			sv := ServerStatus{Address: u.key, Recent: u.recentList()}
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
