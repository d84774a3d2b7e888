package host

import (
	"context"
	"encoding/base64"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/dohfwd/dohfwd/edge/abi"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
)

func TestZZPerf(t *testing.T) {
	wasm, err := os.ReadFile(os.Getenv("ZZWASM"))
	if err != nil {
		t.Skip()
	}
	ctx := context.Background()
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
`), 4)
	if err != nil {
		t.Fatal(err)
	}
	q := query("www.bench.test", 1)
	wire, _ := q.Pack()
	req := abi.AppendRequest(nil, &abi.Request{Method: "GET", Target: "/dns-query?dns=" + base64.RawURLEncoding.EncodeToString(wire), Remote: "127.0.0.1:1", Headers: [][2]string{{"Host", "bench"}, {"Accept", "application/dns-message"}}})
	os.WriteFile("/tmp/h9/ready", nil, 0o644)
	start := time.Now()
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5000 {
				pool.Serve(ctx, req)
			}
		}()
	}
	wg.Wait()
	t.Logf("%v per request", time.Since(start)/20000)
}
