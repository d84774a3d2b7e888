package limits

import (
	"math"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dohfwd/dohfwd/engine"
)

// Config is what a client prefix may take. Zero turns a limit off.
type Config struct {
	// ClientQPS is a prefix's sustained query rate, ClientBurst how many
	// queries it may send at once above it (0 = ClientQPS, at least 1).
	ClientQPS   float64
	ClientBurst int
	// ClientInFlight is how many upstream transactions a prefix may hold
	// at once.
	ClientInFlight int
	// ClientConnections is how many connections a prefix may hold open;
	// Connections how many all clients together may.
	ClientConnections int
	Connections       int
	// PrefixV4 and PrefixV6 group clients: 0 = DefaultPrefixV4/V6.
	PrefixV4, PrefixV6 int
}

// Default prefix lengths: a customer's IPv4 /24 and IPv6 /56, what an
// ISP typically hands one household.
const (
	DefaultPrefixV4 = 24
	DefaultPrefixV6 = 56
)

// DefaultMaxPrefixes bounds the table of per-prefix state: about 100
// bytes each, so some 7 MiB at most.
const DefaultMaxPrefixes = 65536

// Limit names one limit, for counters and events.
type Limit uint8

const (
	LimitRate              Limit = iota // limits.client_qps
	LimitInFlight                       // limits.client_in_flight
	LimitClientConnections              // limits.client_connections
	LimitConnections                    // limits.connections
	NumLimits
)

var limitNames = [NumLimits]string{"client_qps", "client_in_flight", "client_connections", "connections"}

func (l Limit) String() string {
	if l < NumLimits {
		return limitNames[l]
	}
	return "unknown"
}

// Summary is what was refused since the last summary, for a log event
// in place of one line per refusal.
type Summary struct {
	Refused [NumLimits]uint64
	Since   time.Duration // how long the summary covers
	Last    netip.Prefix  // the prefix refused last
}

// Options tune a Limiter.
type Options struct {
	// MaxPrefixes bounds the idle per-prefix entries; 0 = DefaultMaxPrefixes.
	MaxPrefixes int
	// OnSummary, if set, is told what was refused at most once per
	// SummaryEvery (0 = 10 s), when a refusal comes after that time. It
	// must not block.
	OnSummary    func(Summary)
	SummaryEvery time.Duration
}

// settings is one configuration with its derived values.
type settings struct {
	Config
	burst float64
}

func newSettings(c Config) *settings {
	if c.PrefixV4 <= 0 || c.PrefixV4 > 32 {
		c.PrefixV4 = DefaultPrefixV4
	}
	if c.PrefixV6 <= 0 || c.PrefixV6 > 128 {
		c.PrefixV6 = DefaultPrefixV6
	}
	s := &settings{Config: c, burst: float64(c.ClientBurst)}
	if s.burst <= 0 {
		s.burst = max(1, math.Ceil(c.ClientQPS))
	}
	return s
}

// Limiter enforces a Config. Its methods are safe for concurrent use.
type Limiter struct {
	cfg atomic.Pointer[settings]
	now func() time.Time

	mu    sync.Mutex
	table table

	conns   atomic.Int64 // open connections, on every wrapped listener
	refused [NumLimits]atomic.Uint64

	onSummary    func(Summary)
	summaryEvery time.Duration
	lastSummary  atomic.Int64 // unix nanoseconds
	summarized   [NumLimits]uint64
	lastRefused  atomic.Pointer[netip.Prefix]
}

// New returns a Limiter enforcing c.
func New(c Config, o Options) *Limiter {
	l := &Limiter{now: time.Now, onSummary: o.OnSummary, summaryEvery: o.SummaryEvery}
	if l.summaryEvery <= 0 {
		l.summaryEvery = 10 * time.Second
	}
	l.table.init(l, o.MaxPrefixes)
	l.cfg.Store(newSettings(c))
	l.lastSummary.Store(l.now().UnixNano())
	return l
}

// Reconfigure applies c from now on. A change of prefix lengths starts
// the table afresh: holds taken before are released on their old entries.
func (l *Limiter) Reconfigure(c Config) {
	next := newSettings(c)
	old := l.cfg.Swap(next)
	if old.PrefixV4 != next.PrefixV4 || old.PrefixV6 != next.PrefixV6 {
		l.mu.Lock()
		l.table.reset()
		l.mu.Unlock()
	}
}

// Config is the configuration in force.
func (l *Limiter) Config() Config { return l.cfg.Load().Config }

// Refused is how many times each limit refused, since start.
func (l *Limiter) Refused() [NumLimits]uint64 {
	var out [NumLimits]uint64
	for i := range out {
		out[i] = l.refused[i].Load()
	}
	return out
}

// Connections is how many connections are open on the wrapped listeners.
func (l *Limiter) Connections() int64 { return l.conns.Load() }

// Prefixes is how many per-prefix entries the table holds.
func (l *Limiter) Prefixes() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.table.m)
}

// Prefix is the client prefix addr counts against under the limits in force.
func (l *Limiter) Prefix(addr netip.Addr) netip.Prefix { return l.cfg.Load().prefix(addr) }

func (s *settings) prefix(addr netip.Addr) netip.Prefix {
	addr = addr.Unmap().WithZone("")
	bits := s.PrefixV6
	if addr.Is4() {
		bits = s.PrefixV4
	}
	p, _ := addr.Prefix(bits)
	return p
}

// Admit takes one query of client against the rate limit; a prefix whose
// transactions in flight are at their limit is refused too, so the engine
// is not asked for a question it could not send. When it refuses it says
// when to come back.
func (l *Limiter) Admit(client netip.Addr) (ok bool, retryAfter time.Duration) {
	s := l.cfg.Load()
	if s.ClientQPS <= 0 && s.ClientInFlight <= 0 || !client.IsValid() {
		return true, 0
	}
	key := s.prefix(client)
	now := l.now()
	l.mu.Lock()
	e := l.table.get(key, now, s)
	if s.ClientQPS > 0 {
		e.refill(now, s)
		if e.tokens < 1 {
			wait := time.Duration((1 - e.tokens) / s.ClientQPS * float64(time.Second))
			l.mu.Unlock()
			l.refuse(LimitRate, key)
			return false, wait
		}
		e.tokens--
	}
	if s.ClientInFlight > 0 && int(e.inFlight) >= s.ClientInFlight {
		l.mu.Unlock()
		l.refuse(LimitInFlight, key)
		return false, time.Second
	}
	l.mu.Unlock()
	return true, 0
}

// AcquireTransaction takes one of client's upstream transactions in
// flight (engine.ClientLimiter). The slot is nil when nothing is counted.
func (l *Limiter) AcquireTransaction(client netip.Addr) (engine.ClientSlot, bool) {
	s := l.cfg.Load()
	if s.ClientInFlight <= 0 || !client.IsValid() {
		return nil, true
	}
	key := s.prefix(client)
	l.mu.Lock()
	e := l.table.get(key, l.now(), s)
	if int(e.inFlight) >= s.ClientInFlight {
		l.mu.Unlock()
		l.refuse(LimitInFlight, key)
		return nil, false
	}
	e.inFlight++
	l.mu.Unlock()
	return e, true
}

// acquireConn takes one of client's connections; nil when not counted.
func (l *Limiter) acquireConn(client netip.Addr) (*entry, bool) {
	s := l.cfg.Load()
	if s.ClientConnections <= 0 || !client.IsValid() {
		return nil, true
	}
	key := s.prefix(client)
	l.mu.Lock()
	e := l.table.get(key, l.now(), s)
	if int(e.conns) >= s.ClientConnections {
		l.mu.Unlock()
		l.refuse(LimitClientConnections, key)
		return nil, false
	}
	e.conns++
	l.mu.Unlock()
	return e, true
}

func (l *Limiter) releaseConn(e *entry) {
	l.mu.Lock()
	e.conns--
	l.mu.Unlock()
}

// openConn counts one more open connection against limits.connections.
func (l *Limiter) openConn() bool {
	n := l.conns.Add(1)
	if m := l.cfg.Load().Connections; m > 0 && n > int64(m) {
		l.conns.Add(-1)
		l.refuse(LimitConnections, netip.Prefix{})
		return false
	}
	return true
}

func (l *Limiter) closeConn() { l.conns.Add(-1) }

// refuse counts a refusal and, at most once per summaryEvery, reports
// what was refused since the last report.
func (l *Limiter) refuse(limit Limit, key netip.Prefix) {
	l.refused[limit].Add(1)
	if key.IsValid() {
		l.lastRefused.Store(&key)
	}
	if l.onSummary == nil {
		return
	}
	now := l.now().UnixNano()
	last := l.lastSummary.Load()
	if now-last < int64(l.summaryEvery) || !l.lastSummary.CompareAndSwap(last, now) {
		return
	}
	// Only the winner of the swap gets here until the next period.
	sum := Summary{Since: time.Duration(now - last)}
	for i := range sum.Refused {
		n := l.refused[i].Load()
		sum.Refused[i] = n - l.summarized[i]
		l.summarized[i] = n
	}
	if p := l.lastRefused.Load(); p != nil {
		sum.Last = *p
	}
	l.onSummary(sum)
}
