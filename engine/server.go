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
	key  string // addr.String(), made once for logs and status
	// until is the end of the demotion mark as nanoseconds on the engine's
	// clock; 0 means no mark.
	until atomic.Int64
	// probing is set while a background probe of this address runs.
	probing atomic.Bool
	// pools are the idle connected UDP sockets to this address, when the
	// Network lets sockets be reused.
	pools serverPools
}

func newUpstream(addr netip.AddrPort) *upstream {
	return &upstream{addr: addr, key: addr.String()}
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
