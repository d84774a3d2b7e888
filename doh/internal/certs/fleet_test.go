package certs

import (
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dohfwd/dohfwd/doh/internal/certs/redisstore/redistest"
)

// The fleet tests run replicas as separate processes sharing one Redis:
// the real dohfwd binary, or (for renewal, which needs the test-only
// renewal tuning) this test binary as a certs.Manager replica. A layer-4
// balancer of the test's own sits on the port where Pebble validates
// TLS-ALPN-01 and forwards each connection to a live replica, as the load
// balancer in front of a fleet does.

var built struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

// dohfwdBinary builds cmd/dohfwd once for this test binary.
func dohfwdBinary(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		built.dir, built.err = os.MkdirTemp("", "dohfwd-fleet-")
		if built.err != nil {
			return
		}
		built.bin = filepath.Join(built.dir, "dohfwd")
		out, err := exec.Command("go", "build", "-o", built.bin, "github.com/dohfwd/dohfwd/cmd/dohfwd").CombinedOutput()
		if err != nil {
			built.err = fmt.Errorf("go build ./cmd/dohfwd: %v\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bin
}

func removeBuilt() {
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
}

// balancer forwards each TCP connection to a live replica, in turn. A
// replica leaves it before it is killed, as a fleet's balancer takes out a
// replica that fails its health check: the port of a dead replica is free
// for the kernel to hand to any other listener on the machine (a parallel
// test's), and a validation forwarded there fails.
type balancer struct {
	mu      sync.Mutex
	targets []string
	next    int
	routes  logBuffer // where each connection went, for a failed test's log
}

func startBalancer(t *testing.T, ln net.Listener) *balancer {
	t.Helper()
	b := &balancer{}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		if t.Failed() {
			t.Logf("balancer routes:\n%s", b.routes.String())
		}
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { b.forward(c) })
		}
	})
	return b
}

func (b *balancer) add(addr string) {
	b.mu.Lock()
	b.targets = append(b.targets, addr)
	b.mu.Unlock()
}

// remove takes addr out of the targets; connections already forwarded to
// it go on.
func (b *balancer) remove(addr string) {
	b.mu.Lock()
	b.targets = slices.DeleteFunc(b.targets, func(t string) bool { return t == addr })
	b.mu.Unlock()
}

func (b *balancer) forward(c net.Conn) {
	defer c.Close()
	b.mu.Lock()
	targets := append([]string(nil), b.targets...)
	start := b.next
	b.next++
	b.mu.Unlock()
	for i := range targets {
		target := targets[(start+i)%len(targets)]
		up, err := net.DialTimeout("tcp", target, time.Second)
		fmt.Fprintf(&b.routes, "%s %s -> %s: %v\n", time.Now().Format("15:04:05.000"), c.RemoteAddr(), target, err)
		if err != nil {
			continue // a replica not listening (yet, or any more)
		}
		defer up.Close()
		done := make(chan struct{}, 2)
		go func() { _, _ = io.Copy(up, c); up.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
		go func() { _, _ = io.Copy(c, up); c.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
		<-done
		<-done
		return
	}
}

// fleet is one Redis, one Pebble and the balancer in front of replicas.
type fleet struct {
	t      *testing.T
	domain string
	redis  *redistest.Server
	ca     *pebble
	lb     *balancer
	dns    string // upstream for the replicas' engine
	lease  time.Duration
}

func newFleet(t *testing.T, domain string, lease time.Duration) *fleet {
	t.Helper()
	ln, tlsPort := listenLoopback(t)
	f := &fleet{t: t, domain: domain, redis: redistest.Start(t), lease: lease, dns: startTestDNS(t)}
	f.lb = startBalancer(t, ln)
	f.ca = startPebble(t, tlsPort)
	return f
}

// replica is one dohfwd process of the fleet.
type replica struct {
	cmd    *exec.Cmd
	logs   *logBuffer
	addr   string
	lb     *balancer
	exited chan struct{}
}

// startDohfwd runs the real dohfwd binary as a replica behind the balancer.
func (f *fleet) startDohfwd() *replica {
	t := f.t
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	yaml := fmt.Sprintf(`listen:
  https: %s
  admin: ""
scopes:
  - name: test
    default_route: true
    servers: [%s]
fallback_servers: [127.0.0.1:1]
tls:
  mode: acme
  acme:
    domains: [%s]
    email: ops@doh.test
    ca: %s
    ca_root: %s
    profile: default
    storage: %s
    redis:
      lock_lease: %s
log:
  format: json
`, addr, f.dns, f.domain, f.ca.dirURL, f.ca.caRoot, f.redis.URL(), f.lease)
	path := filepath.Join(t.TempDir(), "dohfwd.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	r := &replica{addr: addr, logs: &logBuffer{}, lb: f.lb, exited: make(chan struct{})}
	r.cmd = exec.Command(dohfwdBinary(t), "serve", "--config", path)
	r.cmd.Stdout, r.cmd.Stderr = r.logs, r.logs
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f.lb.add(addr)
	go func() {
		_ = r.cmd.Wait()
		f.lb.remove(addr) // one that died on its own
		close(r.exited)
	}()
	t.Cleanup(func() {
		r.kill()
		if t.Failed() {
			t.Logf("replica %s (pid %d) log:\n%s", r.addr, r.cmd.Process.Pid, r.logs)
		}
	})
	return r
}

// kill takes the replica out of the balancer, then SIGKILLs it.
func (r *replica) kill() {
	r.lb.remove(r.addr)
	_ = r.cmd.Process.Kill()
	<-r.exited
}

// logged reports whether the replica wrote an event with this message.
func (r *replica) logged(msg string) bool {
	return strings.Contains(r.logs.String(), `"message":"`+msg)
}

func (r *replica) waitLogged(t *testing.T, within time.Duration, msg string) {
	t.Helper()
	eventually(t, within, fmt.Sprintf("replica %s to log %q", r.addr, msg), func() bool {
		select {
		case <-r.exited:
			t.Fatalf("replica %s exited; log:\n%s", r.addr, r.logs)
		default:
		}
		return r.logged(msg)
	})
}

// leaf is the certificate a replica serves, checked against Pebble's root
// with a real DoH lookup through the replica's engine.
func (f *fleet) leaf(r *replica, roots *x509.CertPool) *x509.Certificate {
	f.t.Helper()
	_, leaf := dohGet(f.t, r.addr, f.domain, "www.example.", roots)
	return leaf
}

// lockToken reads the certificate lock's token in Redis (host/pid/random),
// "" when no one holds it.
func (f *fleet) lockToken() string {
	c := redis.NewClient(&redis.Options{Addr: f.redis.Addr})
	defer c.Close()
	token, _ := c.Get(context.Background(), "dohfwd:lock:issue_cert_"+f.domain).Result()
	return token
}

// lockTokenPID is the process of a lock token.
func lockTokenPID(t *testing.T, token string) int {
	t.Helper()
	parts := strings.Split(token, "/") // host/pid/random
	if len(parts) != 3 {
		t.Fatalf("lock token %q is not host/pid/random", token)
	}
	pid, err := strconv.Atoi(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

func TestFleetThreeDohfwdReplicasOnRedisMakeOneOrder(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "fleet.doh.test", 3*time.Second)
	var rs []*replica
	for range 3 {
		rs = append(rs, f.startDohfwd())
	}
	for _, r := range rs {
		r.waitLogged(t, obtainTimeout, "certificate ready")
	}
	roots, _ := f.ca.issuingRoots(t)
	first := f.leaf(rs[0], roots)
	for _, r := range rs[1:] {
		if leaf := f.leaf(r, roots); fingerprint(leaf.Raw) != fingerprint(first.Raw) {
			t.Errorf("replica %s serves %s, replica %s serves %s", r.addr, fingerprint(leaf.Raw), rs[0].addr, fingerprint(first.Raw))
		}
	}
	if n := f.ca.orders.Load(); n != 1 {
		t.Errorf("Pebble saw %d orders from three replicas sharing Redis, want 1", n)
	}
}

func TestFleetLockHolderKilledMidOrderAnotherReplicaCompletesAfterTheLease(t *testing.T) {
	t.Parallel()
	lease := 3 * time.Second
	f := newFleet(t, "killed.doh.test", lease)
	held := make(chan struct{})
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	var secondOrder atomic.Int64 // unix nanoseconds
	var secondHolder atomic.Pointer[string]
	hook := func(n int64, r *http.Request) {
		switch n {
		case 1: // the lock holder's order: held until its replica is gone
			close(held)
			select {
			case <-release:
			case <-r.Context().Done():
			}
		case 2:
			secondOrder.Store(time.Now().UnixNano())
			token := f.lockToken() // who holds the lock as the order comes
			secondHolder.Store(&token)
		}
	}
	f.ca.orderHook.Store(&hook)

	var rs []*replica
	for range 3 {
		rs = append(rs, f.startDohfwd())
	}
	select {
	case <-held:
	case <-time.After(obtainTimeout):
		t.Fatal("no replica placed an order")
	}
	killedToken := f.lockToken()
	pid := lockTokenPID(t, killedToken)
	var survivors []*replica
	var killedAt time.Time
	for _, r := range rs {
		if r.cmd.Process.Pid == pid {
			killedAt = time.Now() // before the signal: the holder renews no more from here
			r.kill()              // SIGKILL: no unlock, no goodbye (the balancer drops it first)
			continue
		}
		survivors = append(survivors, r)
	}
	if len(survivors) != 2 {
		t.Fatalf("the lock holder (pid %d) is none of the replicas", pid)
	}
	for _, r := range survivors {
		r.waitLogged(t, obtainTimeout+lease, "certificate ready")
	}
	second := time.Unix(0, secondOrder.Load())
	t.Logf("lease %v: the next order came %v after the lock holder was killed", lease, second.Sub(killedAt))
	// The next order came from a survivor holding the lock, which the dead
	// holder never released: its lease ran out first. Read from Redis as
	// the order came, not from the clock, which a loaded machine skews.
	switch h := secondHolder.Load(); {
	case h == nil:
		t.Error("no second order")
	case *h == "" || *h == killedToken ||
		!slices.ContainsFunc(survivors, func(r *replica) bool { return r.cmd.Process.Pid == lockTokenPID(t, *h) }):
		t.Errorf("the second order came while the lock was %q (the killed holder's was %q), want a survivor's", *h, killedToken)
	}
	if n := f.ca.orders.Load(); n != 2 {
		t.Errorf("Pebble saw %d orders, want 2 (the killed holder's and one more)", n)
	}
	roots, _ := f.ca.issuingRoots(t)
	if a, b := f.leaf(survivors[0], roots), f.leaf(survivors[1], roots); fingerprint(a.Raw) != fingerprint(b.Raw) {
		t.Errorf("survivors serve different certificates")
	}
}

func TestFleetRedisOutageReplicasKeepServingAndRecover(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "outage.doh.test", 2*time.Second)
	rs := []*replica{f.startDohfwd(), f.startDohfwd()}
	for _, r := range rs {
		r.waitLogged(t, obtainTimeout, "certificate ready")
	}
	roots, _ := f.ca.issuingRoots(t)
	want := fingerprint(f.leaf(rs[0], roots).Raw)

	f.redis.Stop()
	for _, r := range rs {
		r.waitLogged(t, 10*time.Second, "certificate store unreachable")
		if got := fingerprint(f.leaf(r, roots).Raw); got != want {
			t.Errorf("replica %s serves %s during the outage, want %s", r.addr, got, want)
		}
	}

	// A replica that starts during the outage waits for the store.
	late := f.startDohfwd()
	late.waitLogged(t, 10*time.Second, "certificate store unreachable at start")

	f.redis.Resume()
	for _, r := range rs {
		r.waitLogged(t, 10*time.Second, "certificate store reachable again")
	}
	// Then it finds the certificate in the store instead of ordering one.
	late.waitLogged(t, obtainTimeout, "certificate ready")
	if got := fingerprint(f.leaf(late, roots).Raw); got != want {
		t.Errorf("the replica started during the outage serves %s, want %s", got, want)
	}
	if n := f.ca.orders.Load(); n != 1 {
		t.Errorf("Pebble saw %d orders, want 1", n)
	}
}

func TestFleetRenewalIsDoneOnceForAllReplicas(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "renew-fleet.doh.test", 2*time.Second)
	cfg := f.ca.acmeConfig(t, f.domain, f.redis.URL()).ACME
	cfg.Profile = shortProfile // 30 s certificates
	cfg.Redis.LockLease = f.lease
	var addrs []string
	var logs []*logBuffer
	var readies []<-chan [2]string
	for range 3 {
		addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		f.lb.add(addr)
		l := &logBuffer{}
		// Renew halfway through the lifetime (15 s), checking twice a
		// second, so the next renewal is 15 s after the one observed.
		// Pebble's renewal info would open the window at issuance.
		readies = append(readies, startReplicaSpec(t, replicaSpec{Config: cfg, Listen: addr,
			RenewCheck: 500 * time.Millisecond, RenewalRatio: 0.5, DisableARI: true}, l))
		addrs, logs = append(addrs, addr), append(logs, l)
	}
	for i, ready := range readies {
		select {
		case _, ok := <-ready:
			if !ok {
				t.Fatalf("replica %s ended without a certificate:\n%s", addrs[i], logs[i])
			}
		case <-time.After(obtainTimeout):
			t.Fatalf("replica %s got no certificate in time:\n%s", addrs[i], logs[i])
		}
	}
	roots, _ := f.ca.issuingRoots(t)
	serial := func(addr string) string {
		_, leaf := dohGet(t, addr, f.domain, "www.example.", roots)
		return leaf.SerialNumber.Text(16)
	}
	first := serial(addrs[0])
	if n := f.ca.orders.Load(); n != 1 {
		t.Fatalf("Pebble saw %d orders for the first certificate, want 1", n)
	}
	var renewed string
	eventually(t, 40*time.Second, "every replica to serve the renewed certificate", func() bool {
		s0 := serial(addrs[0])
		for _, a := range addrs {
			if s := serial(a); s == first || s != s0 {
				return false
			}
		}
		renewed = s0
		return true
	})
	if n := f.ca.orders.Load(); n != 2 {
		t.Errorf("Pebble saw %d orders once every replica served renewed certificate %s, want 2 (one renewal for all)", n, renewed)
	}
	renewers := 0
	for _, l := range logs {
		renewers += strings.Count(l.String(), "certificate renewed successfully")
	}
	if renewers != 1 {
		t.Errorf("%d replicas renewed the certificate, want 1", renewers)
	}
}
