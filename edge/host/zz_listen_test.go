package host

import (
	"context"
	"encoding/base64"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"

	"github.com/dohfwd/dohfwd/edge/abi"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
)

type counter struct{ n atomic.Int64 }

func (c *counter) Before(context.Context, api.Module, api.FunctionDefinition, []uint64, experimental.StackIterator) {
	c.n.Add(1)
}
func (c *counter) After(context.Context, api.Module, api.FunctionDefinition, []uint64) {}
func (c *counter) Abort(context.Context, api.Module, api.FunctionDefinition, error)   {}

type factory struct{ m map[string]*counter }

func (f *factory) NewFunctionListener(def api.FunctionDefinition) experimental.FunctionListener {
	name := def.DebugName()
	if _, _, imp := def.Import(); imp || strings.Contains(name, "runtime.gcStart") || strings.Contains(name, "runtime.schedule") || strings.Contains(name, "runtime.mallocgc") || strings.Contains(name, "runtime.newproc") || strings.Contains(name, "runtime.gcBgMarkWorker") || strings.Contains(name, "runtime.findRunnable") || strings.Contains(name, "runtime.beforeIdle") || strings.Contains(name, "runtime.gopark") || strings.Contains(name, "runtime.morestack") || strings.Contains(name, "runtime.newstack") || strings.Contains(name, "runtime.handleEvent") || strings.Contains(name, "runtime.wasmexport")  {
		c := &counter{}
		f.m[name] = c
		return c
	}
	return nil
}

func TestZZListen(t *testing.T) {
	wasm, err := os.ReadFile("/tmp/h9/mod-names.wasm")
	if err != nil {
		t.Skip()
	}
	f := &factory{m: map[string]*counter{}}
	ctx := experimental.WithFunctionListenerFactory(context.Background(), f)
	rt, err := NewRuntime(ctx, wasm, Options{})
	if err != nil {
		t.Fatal(err)
	}
	addr := upstreamtest.StartNSD(t, upstreamtest.Zone{Origin: "bench.test.", Text: benchZone})
	pool, err := NewPool(ctx, rt, []byte(`scopes:
  - {name: bench, default_route: true, servers: ["`+addr+`"]}
fallback_servers: []
cache: {max_entries: 0}
log: {level: error}
`), 1)
	if err != nil {
		t.Fatal(err)
	}
	q := query("www.bench.test", 1)
	wire, _ := q.Pack()
	req := abi.AppendRequest(nil, &abi.Request{Method: "GET", Target: "/dns-query?dns=" + base64.RawURLEncoding.EncodeToString(wire), Remote: "127.0.0.1:1", Headers: [][2]string{{"Host", "bench"}, {"Accept", "application/dns-message"}}})
	for range 100 {
		pool.Serve(ctx, req)
	}
	for _, c := range f.m {
		c.n.Store(0)
	}
	const n = 2000
	for range n {
		if _, err := pool.Serve(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	var names []string
	for k := range f.m {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if v := f.m[k].n.Load(); v > 0 {
			t.Logf("%-50s %8.3f per request", k, float64(v)/n)
		}
	}
}
