// Package wasmbench measures the engine's per-question path alone, the
// way the edge module calls it (AnswerNow, then
// ResolveMiss under an engine.CancelContext, pooled UDP sockets),
// against a network in memory that answers at once. It builds for the
// host and for wasip1, so the same benchmarks give the engine's cost
// natively and as WebAssembly:
//
//	go test -run '^$' -bench . ./engine/wasmbench
//	PATH=$(go env GOROOT)/lib/wasm:$PATH GOWASIRUNTIME=wazero \
//	  GOOS=wasip1 GOARCH=wasm GOWASM=satconv,signext \
//	  go test -run '^$' -bench . ./engine/wasmbench
//
// (the second needs the wazero command on PATH: go build
// github.com/tetratelabs/wazero/cmd/wazero). The network makes each reply
// by hand from the query, without miekg/dns, so its own cost is small
// beside the engine's; nothing here is asserted but that each question is
// answered.
package wasmbench

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dohfwd/dohfwd/engine"
)

const server = "127.0.1.1:53"

// query is a client query for name/A with an OPT record (4096, no DO).
func query(name string) []byte {
	q := []byte{0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 1}
	for len(name) > 0 {
		i := 0
		for i < len(name) && name[i] != '.' {
			i++
		}
		q = append(q, byte(i))
		q = append(q, name[:i]...)
		if i < len(name) {
			i++
		}
		name = name[i:]
	}
	q = append(q, 0, 0, 1, 0, 1)                       // root, A, IN
	q = append(q, 0, 0, 41, 0x10, 0, 0, 0, 0, 0, 0, 0) // OPT 4096
	return q
}

// memNet is an engine.Network whose one server answers every query at
// once with one A record and an OPT record. With gate set, a Receive
// waits for it to be closed first (a leader whose followers gather).
type memNet struct {
	mu   sync.Mutex
	gate chan struct{}
}

func (*memNet) ReusesUDPSockets() bool { return true }

func (n *memNet) Open(t engine.Transport, server netip.AddrPort, source netip.Addr, deadline time.Time) (engine.Socket, error) {
	return &memSocket{n: n, peer: server}, nil
}

type memSocket struct {
	n    *memNet
	peer netip.AddrPort
	q    []byte
}

func (s *memSocket) Send(b []byte) error {
	s.q = append(s.q[:0], b...)
	return nil
}

func (s *memSocket) Receive(b []byte, deadline time.Time) (int, netip.AddrPort, error) {
	s.n.mu.Lock()
	gate := s.n.gate
	s.n.mu.Unlock()
	if gate != nil {
		<-gate
	}
	return len(reply(b[:0], s.q)), s.peer, nil
}

func (s *memSocket) Close() error { return nil }

// reply appends to dst the answer to q: its header and question, one A
// record (60 s) and an OPT record.
func reply(dst, q []byte) []byte {
	qe := 12
	for q[qe] != 0 {
		qe += 1 + int(q[qe])
	}
	qe += 5
	dst = append(dst, q[:12]...)
	dst[2] |= 0x80 // QR
	dst[3] = 0x80  // RA
	binary.BigEndian.PutUint16(dst[6:], 1)
	binary.BigEndian.PutUint16(dst[8:], 0)
	binary.BigEndian.PutUint16(dst[10:], 1)
	dst = append(dst, q[12:qe]...)
	dst = append(dst, 0xC0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 192, 0, 2, 80)
	return append(dst, 0, 0, 41, 0x04, 0xD0, 0, 0, 0, 0, 0, 0)
}

func newEngine(b *testing.B, n *memNet, cacheEntries int) *engine.Engine {
	e, err := engine.New(engine.Config{
		Cache:  engine.CacheConfig{MaxEntries: cacheEntries},
		Scopes: []engine.ScopeConfig{{Name: "test", DefaultRoute: true, Servers: []string{server}}},
	}, engine.Options{Network: n})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close() })
	return e
}

// asker is one asking front end's state, kept from op to op as the edge
// module keeps a pooled question's.
type asker struct {
	ctx  engine.CancelContext
	miss engine.Miss
	// With a client or a trace, the miss's context names them in qctx,
	// as doh and the module ask with per-client limits and trace context
	// on.
	qctx   engine.QuestionContext
	client netip.Addr
	trace  *engine.Trace
}

// ask asks q as the edge module's front end does: at once, else as a
// miss under a CancelContext.
func (a *asker) ask(e *engine.Engine, q, dst []byte) engine.Response {
	if r, ok := e.AnswerNow(q, dst, a.trace, &a.miss); ok {
		return r
	}
	a.ctx = engine.CancelContext{}
	var ctx context.Context = &a.ctx
	if a.client.IsValid() || a.trace != nil {
		ctx = a.qctx.Set(&a.ctx, a.client, a.trace)
	}
	r := e.ResolveMiss(ctx, &a.miss, dst)
	a.miss = engine.Miss{}
	return r
}

// BenchmarkForward forwards one question per op with the cache off.
func BenchmarkForward(b *testing.B) { benchForward(b, &asker{}) }

// BenchmarkForwardClientTrace is BenchmarkForward as the edge module and
// doh ask with per-client limits and trace context on: the miss's context
// names the client and carries the trace, in a QuestionContext kept with
// the request.
func BenchmarkForwardClientTrace(b *testing.B) {
	benchForward(b, &asker{client: netip.MustParseAddr("192.0.2.1"), trace: &engine.Trace{ID: [16]byte{1}, Span: [8]byte{2}, Flags: 1}})
}

// benchForward forwards one question per op, asked as a asks, with the
// cache off.
func benchForward(b *testing.B, a *asker) {
	e := newEngine(b, &memNet{}, 0)
	q := query("www.example.test.")
	dst := make([]byte, 0, 4096)
	b.ReportAllocs()
	for b.Loop() {
		if r := a.ask(e, q, dst); r.Result != engine.ResultAnswer {
			b.Fatalf("result %v", r.Result)
		}
	}
}

// BenchmarkForwardDistinct forwards one question per op for names the
// cache has not seen (the cache on: each answer is stored).
func BenchmarkForwardDistinct(b *testing.B) {
	e := newEngine(b, &memNet{}, 10000)
	qs := make([][]byte, 1<<16)
	for i := range qs {
		qs[i] = query(fmt.Sprintf("q%d.example.test.", i))
	}
	dst := make([]byte, 0, 4096)
	var a asker
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if r := a.ask(e, qs[i%len(qs)], dst); r.Result != engine.ResultAnswer {
			b.Fatalf("result %v", r.Result)
		}
	}
}

// BenchmarkCacheHit answers one question per op from the cache.
func BenchmarkCacheHit(b *testing.B) {
	e := newEngine(b, &memNet{}, 1000)
	q := query("www.example.test.")
	dst := make([]byte, 0, 4096)
	var a asker
	a.ask(e, q, dst)
	b.ReportAllocs()
	for b.Loop() {
		if r := a.ask(e, q, dst); !r.CacheHit {
			b.Fatalf("not a hit: %v", r.Result)
		}
	}
}

// BenchmarkCoalesced asks one name from 16 goroutines at once, the cache
// off, the server answering only once all have asked: one leader and 15
// followers. An op is one question (a sixteenth of a round).
func BenchmarkCoalesced(b *testing.B) {
	const group = 16
	n := &memNet{}
	e := newEngine(b, n, 0)
	q := query("www.example.test.")
	type groupAsker struct {
		asker
		dst []byte
		go_ chan struct{}
	}
	var wg sync.WaitGroup
	var shared atomic.Int64
	askers := make([]*groupAsker, group)
	for i := range askers {
		a := &groupAsker{dst: make([]byte, 0, 4096), go_: make(chan struct{})}
		askers[i] = a
		go func() {
			for range a.go_ {
				r := a.ask(e, q, a.dst)
				if r.Result != engine.ResultAnswer {
					panic(fmt.Sprintf("result %v", r.Result))
				}
				if r.Shared {
					shared.Add(1)
				}
				wg.Done()
			}
		}()
	}
	defer func() {
		for _, a := range askers {
			close(a.go_)
		}
	}()
	b.ReportAllocs()
	for i := 0; i < b.N; i += group {
		gate := make(chan struct{})
		n.mu.Lock()
		n.gate = gate
		n.mu.Unlock()
		wg.Add(group)
		for _, a := range askers {
			a.go_ <- struct{}{}
		}
		// Until every asker waits: the leader on the gate, the others on
		// its flight.
		for e.InFlight() == 0 {
			runtime.Gosched()
		}
		for range 4 * group {
			runtime.Gosched()
		}
		n.mu.Lock()
		n.gate = nil
		n.mu.Unlock()
		close(gate)
		wg.Wait()
	}
	b.ReportMetric(float64(shared.Load())/float64(b.N), "shared/op")
}
