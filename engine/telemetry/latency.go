package telemetry

import (
	"net/netip"
	"sort"
	"sync"

	"github.com/dohfwd/dohfwd/engine"
)

// LatencyBuckets are the upper bounds, in seconds, of the attempt-latency
// histogram (dohfwd_upstream_attempt_duration_seconds). Prometheus uses
// them natively; the WebAssembly module, which has no Prometheus, counts
// into the same buckets (LatencyTally) for its host to export.
var LatencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2, 4}

// Histogram is one server's attempt latencies: Counts[i] attempts took at
// most LatencyBuckets[i] and more than the bound before it (not
// cumulative); the last count is for the attempts above every bound.
type Histogram struct {
	Counts []uint64 `json:"counts"`
	Sum    float64  `json:"sum"` // seconds
}

// Add adds h's counts and sum to x.
func (x *Histogram) Add(h Histogram) {
	if len(x.Counts) < len(h.Counts) {
		x.Counts = append(x.Counts, make([]uint64, len(h.Counts)-len(x.Counts))...)
	}
	for i, c := range h.Counts {
		x.Counts[i] += c
	}
	x.Sum += h.Sum
}

// LatencyTally counts attempt latencies per server into LatencyBuckets:
// the module's metrics (an assembly.Metrics), read by its host with the
// engine's status. DoH requests are counted by the host itself.
type LatencyTally struct {
	mu      sync.Mutex
	servers map[netip.AddrPort]*Histogram
}

// NewLatencyTally returns an empty tally.
func NewLatencyTally() *LatencyTally {
	return &LatencyTally{servers: map[netip.AddrPort]*Histogram{}}
}

// ObserveAttempt counts one attempt's round-trip time.
func (t *LatencyTally) ObserveAttempt(ev engine.AttemptEvent) {
	s := ev.RTT.Seconds()
	i := sort.SearchFloat64s(LatencyBuckets, s) // the first bound >= s
	t.mu.Lock()
	h := t.servers[ev.Server]
	if h == nil {
		h = &Histogram{Counts: make([]uint64, len(LatencyBuckets)+1)}
		t.servers[ev.Server] = h
	}
	h.Counts[i]++
	h.Sum += s
	t.mu.Unlock()
}

// ObserveRequest does nothing: the host counts the requests it passes on.
func (*LatencyTally) ObserveRequest(proto string, status, rcode int) {}

// ForgetServers drops the servers a reload removed.
func (t *LatencyTally) ForgetServers(keep func(netip.AddrPort) bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for ap := range t.servers {
		if !keep(ap) {
			delete(t.servers, ap)
		}
	}
}

// Snapshot returns a copy of the tally by server address.
func (t *LatencyTally) Snapshot() map[string]Histogram {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]Histogram, len(t.servers))
	for ap, h := range t.servers {
		out[ap.String()] = Histogram{Counts: append([]uint64(nil), h.Counts...), Sum: h.Sum}
	}
	return out
}
