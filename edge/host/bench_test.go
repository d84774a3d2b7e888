package host

import (
	"context"
	"encoding/base64"
	"fmt"
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
// without HTTP in the way: the cost of the module's DoH handler and
// engine, wazero and the polling (whole requests, the Workers glue's way).
// It reports the linear memory the instance ended with.
//
//	go test ./edge/host -run '^$' -bench PoolServe -cpuprofile cpu.prof
func BenchmarkPoolServe(b *testing.B) {
	q := query("www.bench.test", 1)
	wire, _ := q.Pack()
	req := abi.AppendRequest(nil, &abi.Request{
		Method:  "GET",
		Target:  "/dns-query?dns=" + base64.RawURLEncoding.EncodeToString(wire),
		Remote:  "127.0.0.1:1",
		Headers: [][2]string{{"Host", "bench"}, {"Accept", "application/dns-message"}},
	})
	benchPool(b, func(ctx context.Context, pool *Pool) error {
		out, err := pool.Serve(ctx, req)
		if err != nil {
			return err
		}
		resp, err := abi.ParseResponse(out)
		if err == nil && resp.Status != 200 {
			err = fmt.Errorf("status %d", resp.Status)
		}
		return err
	})
}

// BenchmarkPoolResolve is BenchmarkPoolServe with questions, as
// dohfwd-edge's native front end hands them over (abi.EventQuery): the
// cost of the module's engine, wazero and the polling.
func BenchmarkPoolResolve(b *testing.B) {
	wire, _ := query("www.bench.test", 1).Pack()
	benchPool(b, func(ctx context.Context, pool *Pool) error {
		dst := make([]byte, 0, 512)
		if r := pool.Resolve(ctx, wire, dst); r.Rcode != 0 || len(r.Wire) == 0 {
			return fmt.Errorf("rcode %d, %d bytes", r.Rcode, len(r.Wire))
		}
		return nil
	})
}

// benchPool runs one through a pool of one instance over nsd.
func benchPool(b *testing.B, one func(context.Context, *Pool) error) {
	addr := upstreamtest.StartNSD(b, upstreamtest.Zone{Origin: "bench.test.", Text: benchZone})
	ctx := context.Background()
	pool, err := NewPool(ctx, testRuntime(b), []byte(`scopes:
  - {name: bench, default_route: true, servers: ["`+addr+`"]}
fallback_servers: []
cache: {max_entries: 0}
log: {level: error}
`), 1)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close(ctx)
	b.SetParallelism(benchParallelism())
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		// Cancellable, as an HTTP request's context is: the socket
		// imports then watch it.
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		for pb.Next() {
			if err := one(ctx, pool); err != nil {
				b.Error(err)
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
