package host

import (
	"context"
	"encoding/base64"
	"os"
	"strconv"
	"testing"

	"github.com/dohfwd/dohfwd/edge/abi"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
)

const benchZone = `$TTL 60
@   IN SOA ns.bench.test. admin.bench.test. 1 3600 600 86400 60
@   IN NS  ns.bench.test.
ns  IN A   127.0.0.1
www IN A   192.0.2.80
`

// BenchmarkPoolServe runs DoH GET requests straight into one instance
// from 64 goroutines per core, against nsd on loopback (cache off),
// without HTTP in the way: the cost of the module, wazero and the polling.
// It reports the linear memory the instance ended with.
//
//	go test ./edge/host -run '^$' -bench PoolServe -cpuprofile cpu.prof
func BenchmarkPoolServe(b *testing.B) {
	addr := upstreamtest.StartNSD(b, upstreamtest.Zone{Origin: "bench.test.", Text: benchZone})
	const size = 1
	ctx := context.Background()
	pool, err := NewPool(ctx, testRuntime(b), []byte(`scopes:
  - {name: bench, default_route: true, servers: ["`+addr+`"]}
fallback_servers: []
cache: {max_entries: 0}
log: {level: error}
`), size)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close(ctx)
	q := query("www.bench.test", 1)
	wire, _ := q.Pack()
	req := abi.AppendRequest(nil, &abi.Request{
		Method:  "GET",
		Target:  "/dns-query?dns=" + base64.RawURLEncoding.EncodeToString(wire),
		Remote:  "127.0.0.1:1",
		Headers: [][2]string{{"Host", "bench"}, {"Accept", "application/dns-message"}},
	})
	b.SetParallelism(benchParallelism())
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		// Cancellable, as an HTTP request's context is: the socket
		// imports then watch it.
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		for pb.Next() {
			out, err := pool.Serve(ctx, req)
			if err != nil {
				b.Error(err)
				return
			}
			resp, err := abi.ParseResponse(out)
			if err != nil || resp.Status != 200 {
				b.Errorf("status %d, %v", resp.Status, err)
				return
			}
		}
	})
	b.StopTimer()
	var pages uint32
	for _, in := range pool.all {
		pages = max(pages, in.mod.Memory().Size()/65536)
	}
	b.ReportMetric(float64(pages)*64/1024, "MiB-memory/instance")
}

// benchParallelism is 64 goroutines per core, or EDGE_BENCH_STREAMS.
func benchParallelism() int {
	if n, err := strconv.Atoi(os.Getenv("EDGE_BENCH_STREAMS")); err == nil && n > 0 {
		return n
	}
	return 64
}
