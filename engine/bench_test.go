package engine_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/enginetest"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
	"github.com/dohfwd/dohfwd/engine/wiretap"
	"github.com/dohfwd/dohfwd/scripts/testtool"
	"github.com/miekg/dns"
)

// Benchmarks for scripts/bench-engine.sh. They report figures; nothing is
// asserted.

// cpuTime is this process's user and system CPU time. The upstream runs
// in another process (nsd), so its CPU is not in it. System time is mostly
// the kernel's socket work, which the fresh-socket-per-transaction rule
// fixes; user time is the Go code.
func cpuTime() (user, system time.Duration) {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}

// reportCPU reports CPU per op since (user0, sys0): in all, and user only.
func reportCPU(b *testing.B, user0, sys0 time.Duration, metric string) {
	user, sys := cpuTime()
	n := float64(b.N)
	b.ReportMetric(float64(user-user0+sys-sys0)/n, metric)
	b.ReportMetric(float64(user-user0)/n, "user-cpu-ns/op")
}

// upstreamAnswers are the two shapes of upstream answer the forwarding
// benchmarks run against: nsd's default (the A record plus the zone's NS in
// authority and its glue in additional) and a minimal answer (the A record
// alone), as recursive resolvers usually answer. Unpacking the reply is a
// good part of the allocations, so the shape shows in the figures.
var upstreamAnswers = []struct {
	name string
	opts upstreamtest.NSDOptions
}{
	{"full", upstreamtest.NSDOptions{}},
	{"minimal", upstreamtest.NSDOptions{MinimalResponses: true}},
}

// BenchmarkForwardUDP forwards one question per op over loopback UDP to
// nsd, a separate process, and reports our own CPU per question
// (getrusage of this process: the engine, the kernel's work for our
// sockets, and the benchmark loop) beside the wall time and allocations.
// Without nsd it falls back to the in-process Go upstream, whose CPU is
// then included: the metric is named differently so nobody mistakes it.
//
// The socket choices of pool.go (fresh or pooled) run side by side in the same run: a
// fresh socket per transaction, and the pool of connected sockets.
func BenchmarkForwardUDP(b *testing.B) {
	for _, sockets := range []struct {
		name     string
		net      engine.NativeNetwork
		hardened bool // DNS cookies and 0x20 on, as dohfwd's configuration has them
	}{{"fresh", engine.NativeNetwork{FreshSockets: true}, false}, {"pooled", engine.NativeNetwork{}, false},
		{"pooled-cookies-0x20", engine.NativeNetwork{}, true}} {
		for _, shape := range upstreamAnswers {
			b.Run(sockets.name+"/"+shape.name, func(b *testing.B) { benchmarkForwardUDP(b, sockets.net, shape.opts, sockets.hardened) })
		}
	}
}

// BenchmarkForwardUDPWiretap is BenchmarkForwardUDP (pooled sockets,
// minimal answers) with the wiretap off (nil: the default) and on, with a
// tap that copies each message into a bounded queue another goroutine
// takes from every millisecond, as the dnstap writer does: the cost of
// the hook on the question's goroutine.
func BenchmarkForwardUDPWiretap(b *testing.B) {
	b.Run("off", func(b *testing.B) {
		benchmarkForwardUDPTap(b, engine.NativeNetwork{}, upstreamAnswers[1].opts, nil, false)
	})
	b.Run("on", func(b *testing.B) {
		tap := newCopyTap()
		defer tap.close()
		benchmarkForwardUDPTap(b, engine.NativeNetwork{}, upstreamAnswers[1].opts, tap, false)
	})
}

// copyTap copies each message into a queue of 10 000, dropping when it
// is full, and a goroutine takes what waits every millisecond, as
// doh/internal/dnstap's Writer does (without the encoding and the socket,
// which are its goroutine's).
type copyTap struct {
	queue chan *[]byte
	done  chan struct{}
	free  sync.Pool
}

func newCopyTap() *copyTap {
	t := &copyTap{queue: make(chan *[]byte, 10000), done: make(chan struct{})}
	go func() {
		defer close(t.done)
		for {
			select {
			case b, ok := <-t.queue:
				if !ok {
					return
				}
				t.free.Put(b)
				continue
			default:
			}
			time.Sleep(time.Millisecond)
		}
	}()
	return t
}

func (t *copyTap) Tap(m wiretap.Message) {
	b, _ := t.free.Get().(*[]byte)
	if b == nil {
		b = new([]byte)
	}
	*b = append(append((*b)[:0], m.Query...), m.Response...)
	select {
	case t.queue <- b:
	default:
		t.free.Put(b)
	}
}

func (t *copyTap) close() { close(t.queue); <-t.done }

func benchmarkForwardUDP(b *testing.B, network engine.Network, opts upstreamtest.NSDOptions, hardened bool) {
	benchmarkForwardUDPTap(b, network, opts, nil, hardened)
}

func benchmarkForwardUDPTap(b *testing.B, network engine.Network, opts upstreamtest.NSDOptions, tap wiretap.Tap, hardened bool) {
	addr, metric := "", "own-cpu-ns/op"
	if _, ok := upstreamtest.NSDPath(); ok {
		addr = startNSDWith(b, opts)
	} else {
		addr = upstreamtest.Start(b, upstreamtest.Answer("@ 60 IN A 192.0.2.80")).String()
		metric = "cpu-with-upstream-ns/op"
	}
	e, err := engine.New(engine.Config{UpstreamCookies: hardened, Upstream0x20: hardened,
		Scopes: []engine.ScopeConfig{{Name: "test", DefaultRoute: true, Servers: []string{addr}}}},
		engine.Options{Network: network, Wiretap: tap})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	q := newQuery("www.example.test.", dns.TypeA)
	q.SetEdns0(4096, false)
	raw, err := q.Pack()
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	buf := make([]byte, 0, 4096)
	if r := e.Resolve(ctx, raw, buf); r.Result != engine.ResultAnswer {
		b.Fatalf("warm-up: %v", r.Result)
	}
	b.ReportAllocs()
	b.ResetTimer()
	user0, sys0 := cpuTime()
	for b.Loop() {
		if r := e.Resolve(ctx, raw, buf); r.Result != engine.ResultAnswer {
			b.Fatalf("result %v", r.Result)
		}
	}
	reportCPU(b, user0, sys0, metric)
	b.ReportMetric(float64(e.IdleSockets()), "pooled-sockets")
}

// BenchmarkCacheHitWire answers one question from the cache per op: the
// client's bytes in, the reply's bytes out (ID, aged TTLs, OPT, padding).
func BenchmarkCacheHitWire(b *testing.B) {
	up := upstreamtest.Start(b, upstreamtest.Answer("@ 300 IN A 192.0.2.1", "@ 300 IN A 192.0.2.2"))
	e, err := engine.New(engine.Config{
		Cache:  engine.CacheConfig{MaxEntries: 1000},
		Scopes: []engine.ScopeConfig{{Name: "test", DefaultRoute: true, Servers: []string{up.String()}}},
	}, engine.Options{Network: engine.NativeNetwork{}})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	for _, padded := range []bool{false, true} {
		q := newQuery("www.example.test.", dns.TypeA)
		q.SetEdns0(1232, false)
		if padded {
			o := q.IsEdns0()
			o.Option = append(o.Option, &dns.EDNS0_PADDING{Padding: make([]byte, 100)})
		}
		raw, err := q.Pack()
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		buf := make([]byte, 0, 4096)
		e.Resolve(ctx, raw, buf)
		b.Run(fmt.Sprintf("padded=%v", padded), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if r := e.Resolve(ctx, raw, buf); !r.CacheHit {
					b.Fatalf("not a hit: %v", r.Result)
				}
			}
		})
	}
}

// BenchmarkInFlight4096 holds 4 096 transactions in flight to a blackhole
// (a UDP socket nobody reads) and reports the heap they take, measured
// with runtime.ReadMemStats after a GC, minus the heap before.
func BenchmarkInFlight4096(b *testing.B) {
	hole, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	defer hole.Close()
	e, err := engine.New(engine.Config{
		TransactionTimeout: time.Minute,
		Scopes:             []engine.ScopeConfig{{Name: "test", DefaultRoute: true, Servers: []string{hole.LocalAddr().String()}}},
	}, engine.Options{Network: engine.NativeNetwork{}})
	if err != nil {
		b.Fatal(err)
	}
	const n = engine.DefaultInFlightCeiling
	var peak, peakStacks, fds float64
	for b.Loop() {
		var before, during runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for i := range n {
			q := newQuery(fmt.Sprintf("q%d.example.test.", i), dns.TypeA)
			wg.Go(func() { enginetest.Resolve(e, ctx, q) })
		}
		for e.InFlight() < n {
			time.Sleep(time.Millisecond)
		}
		runtime.GC()
		runtime.ReadMemStats(&during)
		fds = max(fds, float64(countFDs()))
		cancel()
		wg.Wait()
		heap := float64(during.HeapInuse-before.HeapInuse) / (1 << 20)
		stacks := float64(during.StackInuse-before.StackInuse) / (1 << 20)
		peak, peakStacks = max(peak, heap), max(peakStacks, stacks)
	}
	b.ReportMetric(peak, "MiB-heap/4096")
	b.ReportMetric(peakStacks, "MiB-stacks/4096")
	b.ReportMetric((peak+peakStacks)*(1<<20)/n, "B-total/transaction")
	b.ReportMetric(fds, "fds-at-4096")
	b.ReportMetric(float64(countFDs()), "fds-after")
	b.ReportMetric(float64(e.IdleSockets()), "pooled-after")
}

// countFDs is the number of descriptors this process holds (Linux).
func countFDs() int {
	ents, _ := os.ReadDir("/proc/self/fd")
	return len(ents)
}

// BenchmarkPeerMiekgExchange is the peer for BenchmarkForwardUDP: miekg/dns's
// Client.Exchange, which also opens a fresh UDP socket per question, against
// the same nsd in the same run. Compare the two own-cpu-ns/op figures as a
// ratio; absolute figures on these machines are noise.
func BenchmarkPeerMiekgExchange(b *testing.B) {
	if _, ok := upstreamtest.NSDPath(); !ok {
		testtool.Missing(b, "nsd is not installed: the peer needs the same upstream as BenchmarkForwardUDP")
	}
	for _, shape := range upstreamAnswers {
		b.Run(shape.name, func(b *testing.B) { benchmarkPeerMiekgExchange(b, shape.opts) })
	}
}

func benchmarkPeerMiekgExchange(b *testing.B, opts upstreamtest.NSDOptions) {
	addr := startNSDWith(b, opts)
	c := &dns.Client{Net: "udp", Timeout: 2 * time.Second}
	q := newQuery("www.example.test.", dns.TypeA)
	q.SetEdns0(1232, false)
	b.ReportAllocs()
	b.ResetTimer()
	user0, sys0 := cpuTime()
	for b.Loop() {
		q.Id = dns.Id()
		r, _, err := c.Exchange(q, addr)
		if err != nil || r.Rcode != dns.RcodeSuccess {
			b.Fatalf("exchange: %v %v", err, r)
		}
	}
	reportCPU(b, user0, sys0, "own-cpu-ns/op")
}
