package engine

import (
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Socket reuse. Opening, connecting and closing a UDP socket
// per transaction is most of a forwarded question's system calls, so a
// transaction may take a connected UDP socket that an earlier one left in
// good order. The rules that keep this as safe as a fresh socket:
//
//   - a pooled socket serves one transaction at a time: it is taken out of
//     the pool for the transaction and put back only when the transaction
//     ended cleanly (a matching, used reply and nothing else received);
//     any failure closes it;
//   - an off-path attacker must guess among at least 2^24 (port, ID) pairs:
//     a socket is reused only when the pool holds at least minChoice
//     idle sockets, and is then chosen among them at random (the ID is a
//     fresh random 16 bits per transaction); with fewer, a fresh socket is
//     opened, whose port the kernel chooses at random;
//   - no socket lives longer than maxSocketLife: one is handed out only
//     when the transaction's deadline falls inside its life, and a sweep
//     closes idle sockets that reach it;
//   - a pool holds only what its server's traffic needs (see expire): an
//     idle socket left unused for idleExpiry is closed, except that up to
//     minChoice of them (the floor) are kept while the server is in use,
//     a transaction having ended cleanly on one of its sockets within
//     idleExpiry. So a busy server keeps the floor it reuses from, the
//     sockets a burst added above it go idleExpiry after the burst, and
//     idleExpiry after a server's last clean transaction its pool is
//     empty: at rest the engine holds no UDP socket at all.
//
// CoreDNS's forward plugin keeps a LIFO stack per upstream, so a steady
// trickle of queries reuses one port; dnsdist multiplexes many queries on
// a few long-lived sockets. Neither meets the floor, hence this pool.

const (
	// minChoice is the idle sockets a pool must hold before it reuses
	// one: 256 ports × 65 536 IDs = 2^24 pairs.
	minChoice = 256
	// maxIdle bounds the sockets one pool keeps at rest.
	maxIdle = 1024
	// maxSocketLife is the longest a pooled socket lives.
	maxSocketLife = 60 * time.Second
	// lifeMargin keeps the end of a socket's last transaction, and the
	// sweep's latency, inside maxSocketLife.
	lifeMargin = time.Second
	// sweepInterval is how often a pool with idle sockets closes the old.
	sweepInterval = time.Second
	// idleExpiry is how long a socket may wait unused above the floor,
	// and how long a pool keeps its floor after its server's last clean
	// transaction. Long enough that a server asked every few seconds
	// keeps its floor; short enough that a process is at rest well
	// within half a minute of its load.
	idleExpiry = 10 * time.Second
)

// SocketReuser is implemented by a Network whose connected UDP sockets
// outlive the call that opened them and may serve one transaction after
// another. Only then does the engine pool them: the native network and
// the edge module's (its host keeps sockets across polls) do; a Network
// without it (memnet in tests) gets a fresh socket per transaction.
type SocketReuser interface {
	ReusesUDPSockets() bool
}

// pooledSocket is an idle socket, when it was opened and when it was
// last put back.
type pooledSocket struct {
	sock      Socket
	x         DatagramExchanger // sock as one, when it is
	born      time.Time
	idleSince time.Time
}

// socketPool is the idle connected UDP sockets to one server from one
// source address.
type socketPool struct {
	mu     sync.Mutex
	idle   []pooledSocket
	closed bool // the server left the configuration, or the engine stopped
	sweep  *time.Timer
	// used is when a transaction last ended cleanly on one of its
	// sockets: the server is in use, and the floor kept, until
	// idleExpiry after it.
	used time.Time
}

// take returns an idle socket chosen at random that lives past deadline,
// or false when the pool holds too few to choose from.
func (p *socketPool) take(deadline time.Time) (pooledSocket, bool) {
	// Old sockets are closed after the unlock: Close is a system call.
	// No defers: they cost a good part of a take as WebAssembly.
	var old []pooledSocket
	p.mu.Lock()
	for len(p.idle) >= minChoice {
		i := rand.IntN(len(p.idle))
		s := p.idle[i]
		last := len(p.idle) - 1
		p.idle[i], p.idle[last] = p.idle[last], pooledSocket{}
		p.idle = p.idle[:last]
		if deadline.Add(lifeMargin).Before(s.born.Add(maxSocketLife)) {
			p.mu.Unlock()
			closeAll(old)
			return s, true
		}
		old = append(old, s)
	}
	p.mu.Unlock()
	closeAll(old)
	return pooledSocket{}, false
}

// put returns a socket whose transaction ended cleanly, or closes it when
// the pool is closed, full, or the socket too old to serve again.
func (p *socketPool) put(s pooledSocket, now time.Time) {
	p.mu.Lock()
	if p.closed || len(p.idle) >= maxIdle || !now.Add(lifeMargin).Before(s.born.Add(maxSocketLife)) {
		p.mu.Unlock()
		s.sock.Close()
		return
	}
	s.idleSince, p.used = now, now
	p.idle = append(p.idle, s)
	if p.sweep == nil {
		p.sweep = time.AfterFunc(sweepInterval, p.sweepOld)
	}
	p.mu.Unlock()
}

// sweepOld closes the idle sockets expire gives up, and runs again while
// any remain.
func (p *socketPool) sweepOld() {
	var old []pooledSocket
	p.mu.Lock()
	p.idle, old = expire(p.idle, time.Now(), p.used)
	if len(p.idle) > 0 && !p.closed {
		p.sweep.Reset(sweepInterval)
	} else {
		p.sweep = nil
	}
	p.mu.Unlock()
	closeAll(old)
}

// expire is the sweep's rule. Of the idle sockets, it gives up (returns
// as old) those whose life ends before the next sweep, and those unused
// for idleExpiry beyond the floor: while the pool was used within
// idleExpiry (a clean transaction at used), up to minChoice sockets stay
// however long they have waited, so that a server in use keeps the
// sockets its reuse chooses among; after that, none. It keeps the rest
// in idle's own array, in their order.
func expire(idle []pooledSocket, now, used time.Time) (keep, old []pooledSocket) {
	floor := 0
	if now.Sub(used) < idleExpiry {
		floor = minChoice
	}
	// Sockets alive past the next sweep, and of those, unused too long.
	alive, stale := 0, 0
	for _, s := range idle {
		if now.Add(sweepInterval + lifeMargin).Before(s.born.Add(maxSocketLife)) {
			alive++
			if now.Sub(s.idleSince) >= idleExpiry {
				stale++
			}
		}
	}
	// The stale sockets to close: those above the floor.
	drop := min(stale, max(alive-floor, 0))
	keep = idle[:0]
	for _, s := range idle {
		switch {
		case !now.Add(sweepInterval + lifeMargin).Before(s.born.Add(maxSocketLife)):
			old = append(old, s)
		case drop > 0 && now.Sub(s.idleSince) >= idleExpiry:
			drop--
			old = append(old, s)
		default:
			keep = append(keep, s)
		}
	}
	clear(idle[len(keep):])
	return keep, old
}

// close closes every idle socket; sockets busy now are closed when their
// transactions end.
func (p *socketPool) close() {
	p.mu.Lock()
	old := p.idle
	p.idle, p.closed = nil, true
	if p.sweep != nil {
		p.sweep.Stop()
		p.sweep = nil
	}
	p.mu.Unlock()
	closeAll(old)
}

// size is the number of idle sockets.
func (p *socketPool) size() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}

func closeAll(s []pooledSocket) {
	for _, x := range s {
		x.sock.Close()
	}
}

// serverPools are the pools of one server, one per source address (the
// zero Addr when the system chooses).
type serverPools struct {
	mu     sync.Mutex
	pools  map[netip.Addr]*socketPool
	closed bool
	// system is pools[netip.Addr{}] once made (the system chooses the
	// source: most scopes), read without the lock or a map look-up; nil
	// once closed. A get that races close may still return it: a closed
	// pool hands out nothing and closes what is put back, as no pool.
	system atomic.Pointer[socketPool]
}

// get returns the pool for source, or nil once the server's pools are
// closed.
func (sp *serverPools) get(source netip.Addr) *socketPool {
	if !source.IsValid() {
		if p := sp.system.Load(); p != nil {
			return p
		}
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.closed {
		return nil
	}
	p := sp.pools[source]
	if p == nil {
		if sp.pools == nil {
			sp.pools = map[netip.Addr]*socketPool{}
		}
		p = &socketPool{}
		sp.pools[source] = p
		if !source.IsValid() {
			sp.system.Store(p)
		}
	}
	return p
}

// close closes every pool of the server: it left the configuration, or
// the engine stopped.
func (sp *serverPools) close() {
	sp.mu.Lock()
	pools := sp.pools
	sp.pools, sp.closed = nil, true
	sp.system.Store(nil)
	sp.mu.Unlock()
	for _, p := range pools {
		p.close()
	}
}

// idle is the number of idle sockets across the server's pools.
func (sp *serverPools) idle() int {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	n := 0
	for _, p := range sp.pools {
		n += p.size()
	}
	return n
}

// IdleSockets is the number of pooled UDP sockets at rest, across servers:
// file descriptors the engine holds between transactions.
func (e *Engine) IdleSockets() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, u := range e.upstreams {
		n += u.idleSockets()
	}
	return n
}

// idleSockets is the number of pooled UDP sockets to u at rest.
func (u *upstream) idleSockets() int { return u.pools.idle() + u.loopPools.idle() }
