package host

import (
	"context"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/dohfwd/dohfwd/edge/moduletest"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
)

var (
	tcpRuntimeOnce sync.Once
	tcpRT          *Runtime
	tcpRuntimeErr  error
)

// tcpOnlyRuntime is a runtime whose instances run TCP only, as on Workers.
func tcpOnlyRuntime(t *testing.T) *Runtime {
	t.Helper()
	wasm, _ := moduletest.Build(t)
	tcpRuntimeOnce.Do(func() {
		tcpRT, tcpRuntimeErr = NewRuntime(context.Background(), wasm, Options{CacheDir: moduletest.CacheDir(t), Stderr: io.Discard, TCPOnly: true})
	})
	if tcpRuntimeErr != nil {
		t.Fatal(tcpRuntimeErr)
	}
	return tcpRT
}

// The module sends a TCP query and names its read in the poll that opens
// the connection (package abi: the host writes and reads once connected),
// so a TCP question costs the module one poll less. A connect that fails
// still ends as the connect's failure: here the first server refuses, the
// attempt counts as connect_error (engine-servers.server-choice-rule: the
// second attempt goes to the second server) at once, without waiting for
// the transaction's 2 s.
func TestWazeroTCPConnectRefusedMovesOn(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.2"))
	cfg := fmt.Appendf(nil, `scopes:
  - name: test
    default_route: true
    servers: [%q, %q]
fallback_servers: []
cache:
  max_entries: 0
log:
  level: error
`, upstreamtest.FreeAddr(t), up.String())
	ctx := context.Background()
	pool, err := NewPool(ctx, tcpOnlyRuntime(t), cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close(ctx)

	start := time.Now()
	m, err := ask(ctx, pool, "www.example.org")
	if err != nil {
		t.Fatal(err)
	}
	wantAnswer(t, m, "192.0.2.2")
	if took := time.Since(start); took > time.Second {
		t.Fatalf("took %v: a refused connect must fail the attempt at once", took)
	}
	if got := transports(up); len(got) != 1 || got[0] != "tcp" {
		t.Fatalf("second server's transports %v, want [tcp]", got)
	}
	st, err := pool.Statuses(ctx)
	if err != nil || len(st) != 1 {
		t.Fatalf("status: %v %v", st, err)
	}
	if a := st[0].Counters.Attempts; a["connect_error"] != 1 || a["answer"] != 1 || a["recv_error"] != 0 {
		t.Fatalf("attempts %v: want one connect_error, then one answer", a)
	}

	// Questions after it go over TCP to the second server first (the
	// first is demoted), each on a connection of its own.
	for i := range 3 {
		m, err := ask(ctx, pool, fmt.Sprintf("n%d.example.org", i))
		if err != nil {
			t.Fatal(err)
		}
		wantAnswer(t, m, "192.0.2.2")
	}
	if n := len(up.Queries()); n != 4 {
		t.Fatalf("second server read %d queries, want 4", n)
	}
}
