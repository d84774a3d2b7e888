package engine

import (
	"net/netip"
	"sync/atomic"
	"time"
)

// upstream is one server address and its demotion mark. One upstream exists
// per address, shared by every scope that lists it, so the mark belongs to
// the address.
type upstream struct {
	addr netip.AddrPort
	key  string // ep.String(), made once for logs and status
	// ep is the server as configured: its transport, TLS name, path and
	// pins (endpoint.go). A plain server's is its address only.
	ep Endpoint
	// enc is the state of an encrypted server's connections and its
	// counters (dot.go); nil for a plain server.
	enc *encryptedState
	// until is the end of the demotion mark as nanoseconds on the engine's
	// clock; 0 means no mark.
	until atomic.Int64
	// probing is set while a background probe of this address runs.
	probing atomic.Bool
	// pools are the idle connected UDP sockets to this address, when the
	// Network lets sockets be reused.
	pools serverPools
	// loopPools are its idle sockets in the upstream loop's epoll set.
	loopPools serverPools
	// recent holds the outcomes of the latest attempts, 4 bits each
	// (outcome+1, newest in the low bits; 0 = none), for operators.
	recent atomic.Uint64
	// cookie holds its DNS cookies (cookie.go).
	cookie upstreamCookie
	// caseless marks a server found not to keep the question's case; it
	// is asked in lower case (namecase.go). caseMisses counts its latest
	// replies in a row with the name in another case.
	caseless   atomic.Bool
	caseMisses atomic.Int32
}

// recentOutcomes is how many outcomes upstream.recent holds.
const recentOutcomes = 16

// Every outcome+1 fits in 4 bits: this constant overflows otherwise.
const _ = 15 - numOutcomes

// note records an attempt's outcome among the recent ones. Load and store
// are not one step: two attempts ending at once may lose one record, which
// an operator's view can afford and a CAS loop on the hot path cannot.
func (u *upstream) note(o Outcome) { u.recent.Store(u.recent.Load()<<4 | uint64(o+1)) }

// recentList returns the recent outcomes, oldest first.
func (u *upstream) recentList() []string {
	r := u.recent.Load()
	out := make([]string, 0, recentOutcomes)
	for i := recentOutcomes - 1; i >= 0; i-- {
		if v := (r >> (4 * i)) & 0xF; v != 0 {
			out = append(out, Outcome(v-1).String())
		}
	}
	return out
}

func newUpstream(ep Endpoint) *upstream {
	u := &upstream{addr: ep.Addr, key: ep.String(), ep: ep}
	if ep.Encrypted() {
		u.enc = &encryptedState{}
	}
	newUpstreamCookie(&u.cookie)
	return u
}

// transportFor is the first transport of an attempt to u: its own for an
// encrypted server, else first (UDP, or TCP under Options.TCPOnly).
func (u *upstream) transportFor(first Transport) Transport {
	if u.enc != nil {
		return u.ep.Transport
	}
	return first
}

// demote marks the server until period from now; a later failure moves the
// mark forward.
func (u *upstream) demote(now, period time.Duration) {
	next := int64(now + period)
	for {
		cur := u.until.Load()
		// Concurrent failures may finish out of order: the mark only
		// moves forward.
		if cur >= next || u.until.CompareAndSwap(cur, next) {
			return
		}
	}
}

// clear removes the mark at once.
func (u *upstream) clear() { u.until.Store(0) }

// markUntil returns the mark's end, or 0.
func (u *upstream) markUntil() time.Duration { return time.Duration(u.until.Load()) }
