package engine_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/enginetest"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
	"github.com/miekg/dns"
)

// The socket-reuse rules of pool.go, on real loopback sockets: a pooled
// socket is chosen at random among at least 256, any failure closes it,
// and a server's sockets go when it leaves the configuration or the
// engine stops.

// nativeEngine is an engine over real sockets (pooling on) with one
// default-route scope listing servers.
func nativeEngine(t *testing.T, timeout time.Duration, servers ...string) *engine.Engine {
	t.Helper()
	e, err := engine.New(engine.Config{
		TransactionTimeout: timeout,
		Scopes:             []engine.ScopeConfig{{Name: "main", DefaultRoute: true, Servers: servers}},
	}, engine.Options{Network: engine.NativeNetwork{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func askN(t *testing.T, e *engine.Engine, prefix string, n int) {
	t.Helper()
	for i := range n {
		if r := enginetest.Resolve(e, context.Background(), newQuery(fmt.Sprintf("%s%d.example.test.", prefix, i), dns.TypeA)); r.Result != engine.ResultAnswer {
			t.Fatalf("question %d: %v", i, r.Result)
		}
	}
}

// The floor: over a few thousand questions, the upstream sees at least 256
// source ports in every window of 512 questions (so at each moment the
// attacker's port is one of at least 256, with a random 16-bit ID: 2^24
// pairs), no port carries more than a few percent of the traffic (a
// stack or FIFO would fail one of the two), and the IDs are random.
func TestSocketPoolSpoofingFloor(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.1"))
	e := nativeEngine(t, 2*time.Second, up.String())
	const n = 3000
	askN(t, e, "floor", n)
	checkSpoofingFloor(t, e, up.Queries(), n)
}

// checkSpoofingFloor asserts the spoofing floor of pool.go over the n queries qs the
// upstream read from e: at least 256 source ports and at most 600 (the
// pool is reused), no port favoured, random IDs, at least 160 ports in
// every window of 512 questions once the pool filled, and the pool at
// rest between 256 and 1024 sockets.
func checkSpoofingFloor(t *testing.T, e *engine.Engine, qs []upstreamtest.Query, n int) {
	t.Helper()
	if len(qs) != n {
		t.Fatalf("upstream read %d queries, want %d", len(qs), n)
	}
	ports := map[uint16]int{}
	ids := map[uint16]bool{}
	for _, q := range qs {
		ports[q.From.Port()]++
		ids[q.Msg.Id] = true
	}
	if len(ports) < 256 {
		t.Errorf("%d distinct source ports over %d questions, want >= 256", len(ports), n)
	}
	if len(ports) > 600 {
		t.Errorf("%d distinct source ports over %d questions: sockets are not reused", len(ports), n)
	}
	for p, c := range ports {
		if c > n/20 {
			t.Errorf("port %d carried %d of %d questions: the choice is not random", p, c, n)
		}
	}
	// 3000 random 16-bit IDs: about 2 930 distinct are expected.
	if len(ids) < n*9/10 {
		t.Errorf("%d distinct IDs over %d questions, want >= %d", len(ids), n, n*9/10)
	}
	// After the pool has filled, every window of 512 questions spreads
	// over at least 160 ports (a random choice among 256 gives ~221).
	for start := 512; start+512 <= n; start += 256 {
		w := map[uint16]bool{}
		for _, q := range qs[start : start+512] {
			w[q.From.Port()] = true
		}
		if len(w) < 160 {
			t.Errorf("questions %d-%d used %d ports, want >= 160", start, start+512, len(w))
		}
	}
	if idle := e.IdleSockets(); idle < 256 || idle > 1024 {
		t.Errorf("%d idle sockets at rest, want 256..1024", idle)
	}
}

// Any failure closes the socket: the source port of a failed transaction
// is free to bind once the question is answered, and never carries
// another query while the rest of the pool is reused. (The test binds
// each such port itself and holds it, so the kernel cannot hand it to a
// fresh socket of the engine's: a closed port it reassigned at random
// would look like a failed socket reused.)
func TestSocketPoolFailureClosesSocket(t *testing.T) {
	up := upstreamtest.Start(t, func(q upstreamtest.Query) upstreamtest.Action {
		if q.Msg == nil {
			return upstreamtest.Action{}
		}
		name := q.Msg.Question[0].Name
		good := upstreamtest.ReplyTo(q.Msg, dns.RcodeSuccess, "@ 60 IN A 192.0.2.1")
		switch {
		case strings.HasPrefix(name, "servfail"):
			return upstreamtest.Action{Replies: []upstreamtest.Reply{{Msg: upstreamtest.ReplyTo(q.Msg, dns.RcodeServerFailure)}}}
		case strings.HasPrefix(name, "silent"):
			return upstreamtest.Action{}
		case strings.HasPrefix(name, "wrongid"):
			bad := good.Copy()
			bad.Id ^= 0x5a5a
			return upstreamtest.Action{Replies: []upstreamtest.Reply{{Msg: bad}, {Msg: good, Delay: 5 * time.Millisecond}}}
		case strings.HasPrefix(name, "garbage"):
			return upstreamtest.Action{Replies: []upstreamtest.Reply{{Raw: []byte{1, 2, 3}}, {Msg: good, Delay: 5 * time.Millisecond}}}
		}
		return upstreamtest.Action{Replies: []upstreamtest.Reply{{Msg: good}}}
	})
	e := nativeEngine(t, 300*time.Millisecond, up.String())
	askN(t, e, "warm", 400)
	failed := map[uint16]string{}
	for _, kind := range []string{"servfail", "silent", "wrongid", "garbage"} {
		before := len(up.Queries())
		enginetest.Resolve(e, context.Background(), newQuery(kind+".example.test.", dns.TypeA))
		for _, q := range up.Queries()[before:] {
			failed[q.From.Port()] = kind
			holdPort(t, q.From)
		}
		askN(t, e, "after-"+kind, 100)
	}
	if len(failed) == 0 {
		t.Fatal("no failed transactions seen")
	}
	askN(t, e, "later", 600)
	all := up.Queries()
	lastFail := 0
	for i, q := range all {
		if n := q.Msg.Question[0].Name; strings.HasPrefix(n, "servfail.") || strings.HasPrefix(n, "silent.") ||
			strings.HasPrefix(n, "wrongid.") || strings.HasPrefix(n, "garbage.") {
			lastFail = i
		}
	}
	reused := 0
	for _, q := range all[lastFail+1:] {
		n := q.Msg.Question[0].Name
		if strings.HasPrefix(n, "servfail") || strings.HasPrefix(n, "silent") || strings.HasPrefix(n, "wrongid") || strings.HasPrefix(n, "garbage") {
			continue
		}
		if kind, ok := failed[q.From.Port()]; ok {
			t.Errorf("port %d failed a %s transaction and carried %s later", q.From.Port(), kind, n)
		}
		reused++
	}
	if reused == 0 {
		t.Fatal("no questions after the failures")
	}
}

// holdPort binds the UDP address a failed transaction's socket had, for
// the rest of the test: it must be free, the engine having closed that
// socket (within a second: the close may follow the answer).
func holdPort(t *testing.T, at netip.AddrPort) {
	t.Helper()
	for deadline := time.Now().Add(time.Second); ; time.Sleep(5 * time.Millisecond) {
		c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(at))
		if err == nil {
			t.Cleanup(func() { c.Close() })
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the socket of a failed transaction is still open: %v", err)
		}
	}
}

// openFDs counts this process's open file descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("counts descriptors in /proc/self/fd")
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// A reload that removes a server while its sockets are busy: the busy
// transactions finish on the configuration they started with, their
// sockets are closed rather than pooled, the idle ones go at once, and
// stopping the engine closes what the remaining server held.
func TestSocketPoolReleasedOnReloadRemovalAndStop(t *testing.T) {
	slow := upstreamtest.Start(t, upstreamtest.Delay(200*time.Millisecond, upstreamtest.Answer("@ 60 IN A 192.0.2.1")))
	other := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.2"))
	base := openFDs(t)
	e, err := engine.New(engine.Config{Scopes: []engine.ScopeConfig{{Name: "main", DefaultRoute: true, Servers: []string{slow.String()}}}},
		engine.Options{Network: engine.NativeNetwork{}})
	if err != nil {
		t.Fatal(err)
	}
	// Fill the pool: 300 questions at once, each holding its socket 200 ms.
	var wg sync.WaitGroup
	for i := range 300 {
		wg.Go(func() {
			enginetest.Resolve(e, context.Background(), newQuery(fmt.Sprintf("fill%d.example.test.", i), dns.TypeA))
		})
	}
	wg.Wait()
	if idle := e.IdleSockets(); idle < 256 {
		t.Fatalf("%d idle sockets after filling, want >= 256", idle)
	}
	// 40 questions busy on the slow server's sockets, then the reload.
	results := make(chan engine.Result, 40)
	for i := range 40 {
		wg.Go(func() {
			results <- enginetest.Resolve(e, context.Background(), newQuery(fmt.Sprintf("busy%d.example.test.", i), dns.TypeA)).Result
		})
	}
	for e.InFlight() < 40 {
		time.Sleep(time.Millisecond)
	}
	if err := e.Reconfigure(engine.Config{Scopes: []engine.ScopeConfig{{Name: "main", DefaultRoute: true, Servers: []string{other.String()}}}}); err != nil {
		t.Fatal(err)
	}
	if idle := e.IdleSockets(); idle != 0 {
		t.Errorf("%d idle sockets right after the reload, want 0 (the removed server's)", idle)
	}
	wg.Wait()
	close(results)
	for r := range results {
		if r != engine.ResultAnswer {
			t.Errorf("a busy question ended %v, want answer on the configuration it started with", r)
		}
	}
	if idle := e.IdleSockets(); idle != 0 {
		t.Errorf("%d idle sockets after the busy questions ended, want 0: the removed server's sockets were pooled", idle)
	}
	if fds := openFDs(t); fds > base+5 {
		t.Errorf("%d descriptors open after the reload, %d before the engine: the removed server's sockets leak", fds, base)
	}
	askN(t, e, "other", 300)
	if e.IdleSockets() == 0 {
		t.Error("the remaining server pooled nothing")
	}
	e.Close()
	if idle := e.IdleSockets(); idle != 0 {
		t.Errorf("%d idle sockets after Close, want 0", idle)
	}
	if fds := openFDs(t); fds > base+5 {
		t.Errorf("%d descriptors open after Close, %d before the engine", fds, base)
	}
	// A stopped engine still answers, on fresh sockets it does not keep.
	askN(t, e, "stopped", 3)
	if idle := e.IdleSockets(); idle != 0 {
		t.Errorf("a stopped engine pooled %d sockets", idle)
	}
}

// A fresh network (FreshSockets) never pools: one socket per transaction.
func TestFreshSocketsNeverPooled(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.1"))
	e, err := engine.New(engine.Config{Scopes: []engine.ScopeConfig{{Name: "main", DefaultRoute: true, Servers: []string{up.String()}}}},
		engine.Options{Network: engine.NativeNetwork{FreshSockets: true}})
	if err != nil {
		t.Fatal(err)
	}
	askN(t, e, "fresh", 300)
	if idle := e.IdleSockets(); idle != 0 {
		t.Errorf("%d idle sockets with FreshSockets", idle)
	}
	ports := map[netip.AddrPort]bool{}
	for _, q := range up.Queries() {
		ports[q.From] = true
	}
	if len(ports) < 250 {
		t.Errorf("%d source ports for 300 fresh sockets", len(ports))
	}
}

// A reused connected socket still learns of an ICMP port-unreachable at
// once: a server that stops answers the next question's attempt with a
// refusal, not a 2 s timeout, and that socket is not pooled again.
func TestSocketPoolRefusalKnownAtOnce(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.1"))
	log := &eventLog{}
	e, err := engine.New(engine.Config{Scopes: []engine.ScopeConfig{{Name: "main", DefaultRoute: true, Servers: []string{up.String()}}}},
		engine.Options{Network: engine.NativeNetwork{}, Observer: log})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	askN(t, e, "warm", 300)
	idle := e.IdleSockets()
	if idle < 256 {
		t.Fatalf("%d idle sockets after warming up", idle)
	}
	up.Close()
	r := enginetest.Resolve(e, context.Background(), newQuery("gone.example.test.", dns.TypeA))
	if r.Result != engine.ResultUnavailable {
		t.Errorf("result %v, want unavailable", r.Result)
	}
	as := log.attemptList()
	last := as[len(as)-3:]
	for _, a := range last {
		// A timeout here would mean the socket never heard the ICMP.
		if a.Outcome != engine.OutcomeRecvError && a.Outcome != engine.OutcomeSendError {
			t.Errorf("attempt %d outcome %v, want a refusal (recv_error or send_error)", a.Attempt, a.Outcome)
		}
	}
	if after := e.IdleSockets(); after > idle-1 {
		t.Errorf("%d idle sockets after three refused attempts, %d before: a refused socket went back", after, idle)
	}
}

// The in-flight ceiling counts transactions, not sockets: with hundreds of
// idle sockets pooled, a question past the ceiling is still refused.
func TestSocketPoolCeilingCountsTransactions(t *testing.T) {
	up := upstreamtest.Start(t, func(q upstreamtest.Query) upstreamtest.Action {
		a := upstreamtest.Answer("@ 60 IN A 192.0.2.1")(q)
		if q.Msg != nil && strings.HasPrefix(q.Msg.Question[0].Name, "slow") {
			a.Replies[0].Delay = 300 * time.Millisecond
		}
		return a
	})
	e, err := engine.New(engine.Config{InFlightCeiling: 2,
		Scopes: []engine.ScopeConfig{{Name: "main", DefaultRoute: true, Servers: []string{up.String()}}}},
		engine.Options{Network: engine.NativeNetwork{}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	askN(t, e, "warm", 300)
	if idle := e.IdleSockets(); idle < 256 {
		t.Fatalf("%d idle sockets after warming up", idle)
	}
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			enginetest.Resolve(e, context.Background(), newQuery(fmt.Sprintf("slow%d.example.test.", i), dns.TypeA))
		})
	}
	for e.InFlight() < 2 {
		time.Sleep(time.Millisecond)
	}
	r := enginetest.Resolve(e, context.Background(), newQuery("third.example.test.", dns.TypeA))
	wg.Wait()
	if r.Result != engine.ResultUnavailable || r.Reason != engine.ReasonInFlightCeiling {
		t.Errorf("third question: %v (%v), want unavailable by the in-flight ceiling", r.Result, r.Reason)
	}
	if n := e.Counters().Refused; n != 1 {
		t.Errorf("refused %d, want 1", n)
	}
}

// Status shows the pooled sockets held: in all, and per server.
func TestSocketPoolShownInStatus(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.1"))
	e := nativeEngine(t, 2*time.Second, up.String())
	askN(t, e, "shown", 3)
	st := e.Status()
	if st.UpstreamSockets != 3 || e.IdleSockets() != 3 {
		t.Fatalf("status upstream_sockets %d (IdleSockets %d), want the 3 of 3 clean transactions", st.UpstreamSockets, e.IdleSockets())
	}
	if got := st.Scopes[0].Servers[0].PooledSockets; got != 3 {
		t.Errorf("server %s pooled_sockets %d, want 3", st.Scopes[0].Servers[0].Address, got)
	}
	merged := engine.MergeStatuses([]engine.Status{st, st})
	if merged.UpstreamSockets != 6 || merged.Scopes[0].Servers[0].PooledSockets != 6 {
		t.Errorf("merged: upstream_sockets %d, server pooled_sockets %d; want the sums, 6 and 6",
			merged.UpstreamSockets, merged.Scopes[0].Servers[0].PooledSockets)
	}
}
