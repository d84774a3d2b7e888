package host

import (
	"context"
	"encoding/base64"
	"testing"
	"time"

	"github.com/dohfwd/dohfwd/edge/abi"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
)

func TestZZSeq(t *testing.T) {
	ctx := context.Background()
	addr := upstreamtest.StartNSD(t, upstreamtest.Zone{Origin: "bench.test.", Text: benchZone})
	pool, err := NewPool(ctx, testRuntime(t), []byte(`scopes:
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
	for range 200 {
		pool.Serve(ctx, req)
	}
	for range 3 {
		start := time.Now()
		const n = 3000
		for range n {
			pool.Serve(ctx, req)
		}
		t.Logf("%v per request", time.Since(start)/n)
	}
	// status only: pure module cost without network
	in := pool.all[0]
	start := time.Now()
	for range 3000 {
		in.status.Call(ctx)
	}
	t.Logf("status %v per call", time.Since(start)/3000)
}
