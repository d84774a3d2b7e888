package host

import (
	"context"
	"io"
	"sync/atomic"
	"testing"

	"github.com/miekg/dns"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"

	"github.com/dohfwd/dohfwd/edge/abi"
	"github.com/dohfwd/dohfwd/edge/moduletest"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
)

// clockCalls counts the module's calls of WASI's clock_time_get.
type clockCalls struct{ n atomic.Uint64 }

func (c *clockCalls) NewFunctionListener(def api.FunctionDefinition) experimental.FunctionListener {
	if def.GoFunction() == nil || def.ModuleName() != "wasi_snapshot_preview1" || def.Name() != "clock_time_get" {
		return nil
	}
	return c
}

func (c *clockCalls) Before(context.Context, api.Module, api.FunctionDefinition, []uint64, experimental.StackIterator) {
	c.n.Add(1)
}
func (c *clockCalls) After(context.Context, api.Module, api.FunctionDefinition, []uint64) {}
func (c *clockCalls) Abort(context.Context, api.Module, api.FunctionDefinition, error)    {}

// A cache hit answered by dohfwd_ask reads the clock once (the lookup's
// reading is its answer's time, engine's hitEndsAtLookup): as
// WebAssembly a time.Now is two host calls, wall and monotonic clock,
// about 0.2 µs each under wazero. Counted with a function listener on
// the WASI import, 2 calls per hit; the second reading made it 4.
func TestWazeroCacheHitReadsClockOnce(t *testing.T) {
	t.Parallel()
	wasm, _ := moduletest.Build(t)
	calls := new(clockCalls)
	ctx := experimental.WithFunctionListenerFactory(context.Background(), calls)
	r, err := NewRuntime(ctx, wasm, Options{CacheDir: moduletest.CacheDir(t), Stderr: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	up := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.5"))
	in, err := r.NewInstance(context.Background(), withConfig(edgeConfig(up), "cache: {max_entries: 100}\n"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(context.Background()) })
	wire, err := query("clock.example.org", dns.TypeA).Pack()
	if err != nil {
		t.Fatal(err)
	}
	q := &abi.Query{Wire: wire}
	if resp, err := in.Resolve(context.Background(), q, nil); err != nil || resp.Rcode != dns.RcodeSuccess {
		t.Fatalf("the miss: rcode %d, %v", resp.Rcode, err)
	}
	const hits = 50
	before := calls.n.Load()
	for i := range hits {
		resp, asked, ok, err := in.askNow(q, nil, true)
		if err != nil || !asked || !ok || !resp.CacheHit {
			t.Fatalf("hit %d: asked %v, answered %v, cache hit %v, %v", i, asked, ok, resp.CacheHit, err)
		}
	}
	if n := calls.n.Load() - before; n > 2*hits {
		t.Errorf("%d hits made %d clock_time_get calls (%.1f each), want at most 2 each (one time.Now)", hits, n, float64(n)/hits)
	}
}
