package engine_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/enginetest"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
	"github.com/dohfwd/dohfwd/scripts/testtool"
	"github.com/miekg/dns"
)

// egressConfig is one default-route scope on srv with the given sources.
func egressConfig(srv *upstreamtest.Server, v4, v6 []string) engine.Config {
	return engine.Config{Scopes: []engine.ScopeConfig{{
		Name: "egress", DefaultRoute: true, Servers: []string{srv.String()}, SourcesV4: v4, SourcesV6: v6,
	}}}
}

func sourcesSeen(srv *upstreamtest.Server) []string {
	var from []string
	for _, q := range srv.Queries() {
		from = append(from, q.Transport+" "+q.From.Addr().String())
	}
	return from
}

// Linux routes all of 127.0.0.0/8 to lo, so 127.0.0.2 and .3 are local
// addresses that can be bound without configuring anything.
func TestEgressSourceRoundRobinSeenByUpstream(t *testing.T) {
	t.Parallel()
	srv := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.1"))
	e := startEngine(t, egressConfig(srv, []string{"127.0.0.2", "127.0.0.3"}, []string{"::1"}), engine.NativeNetwork{})
	for i := range 4 {
		if r := enginetest.Resolve(e, context.Background(), queryFor(fmt.Sprintf("e%d.example.", i), dns.TypeA)); r.Result != engine.ResultAnswer {
			t.Fatalf("question %d: %v (%v)", i, r.Result, r.Reason)
		}
	}
	want := "udp 127.0.0.2,udp 127.0.0.3,udp 127.0.0.2,udp 127.0.0.3"
	if got := strings.Join(sourcesSeen(srv), ","); got != want {
		t.Fatalf("upstream saw queries from %s, want %s (IPv4 sources round-robin, the IPv6 one unused)", got, want)
	}
}

func TestEgressSourceOverTCPRetry(t *testing.T) {
	t.Parallel()
	truncated := func(q upstreamtest.Query) upstreamtest.Action {
		m := upstreamtest.ReplyTo(q.Msg, dns.RcodeSuccess)
		m.Truncated = true
		return upstreamtest.Action{Replies: []upstreamtest.Reply{{Msg: m}}}
	}
	srv := upstreamtest.Start(t, upstreamtest.ByTransport(truncated, upstreamtest.Answer("@ 60 IN A 192.0.2.1")))
	e := startEngine(t, egressConfig(srv, []string{"127.0.0.2", "127.0.0.3"}, nil), engine.NativeNetwork{})
	if r := enginetest.Resolve(e, context.Background(), queryFor("tc.example.", dns.TypeA)); r.Result != engine.ResultAnswer {
		t.Fatalf("%v (%v), want the TCP answer", r.Result, r.Reason)
	}
	want := "udp 127.0.0.2,tcp 127.0.0.3"
	if got := strings.Join(sourcesSeen(srv), ","); got != want {
		t.Fatalf("upstream saw %s, want %s: every transaction takes the next source", got, want)
	}
}

func TestEgressSourceIPv6(t *testing.T) {
	t.Parallel()
	pc, err := net.ListenPacket("udp6", "[::1]:0")
	if err != nil {
		inOwnNetns(t, fmt.Sprintf("no IPv6 loopback here (%v): the IPv6 source family is untested", err))
		return
	}
	var mu sync.Mutex
	var from []string
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		mu.Lock()
		from = append(from, w.RemoteAddr().(*net.UDPAddr).IP.String())
		mu.Unlock()
		w.WriteMsg(upstreamtest.ReplyTo(q, dns.RcodeSuccess, "@ 60 IN A 192.0.2.1"))
	})}
	go srv.ActivateAndServe()
	t.Cleanup(func() { srv.Shutdown() })
	// The IPv6 server is asked from the IPv6 source: an IPv4 source
	// could not even be bound for it.
	cfg := engine.Config{Scopes: []engine.ScopeConfig{{Name: "v6", DefaultRoute: true,
		Servers: []string{pc.LocalAddr().String()}, SourcesV4: []string{"127.0.0.2"}, SourcesV6: []string{"::1"}}}}
	e := startEngine(t, cfg, engine.NativeNetwork{})
	if r := enginetest.Resolve(e, context.Background(), queryFor("six.example.", dns.TypeA)); r.Result != engine.ResultAnswer {
		t.Fatalf("%v (%v), want the answer over IPv6", r.Result, r.Reason)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(from) != 1 || from[0] != "::1" {
		t.Fatalf("IPv6 upstream saw queries from %v, want [::1]", from)
	}
}

// A source that cannot be bound is a local error (resolvd: EADDRNOTAVAIL):
// the attempt is spent and upstream_failed counts it, but the server is not
// demoted and nothing is sent.
func TestEgressUnbindableSourceIsLocalError(t *testing.T) {
	t.Parallel()
	if b, _ := os.ReadFile("/proc/sys/net/ipv4/ip_nonlocal_bind"); strings.TrimSpace(string(b)) == "1" {
		// The sysctl is per network namespace, 0 in a new one.
		inOwnNetns(t, "net.ipv4.ip_nonlocal_bind=1: any address can be bound here, an unbindable source is untested")
		return
	}
	srv := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.1"))
	var events []engine.AttemptEvent
	obs := attemptRecorder{on: func(ev engine.AttemptEvent) { events = append(events, ev) }}
	// 192.0.2.1 (TEST-NET-1) is on no interface.
	e, err := engine.New(egressConfig(srv, []string{"192.0.2.1"}, nil), engine.Options{Network: engine.NativeNetwork{}, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	r := enginetest.Resolve(e, context.Background(), queryFor("nobind.example.", dns.TypeA))
	if r.Result != engine.ResultUnavailable || r.Attempts != 3 {
		t.Fatalf("%v (%v) after %d attempts, want unavailable after 3", r.Result, r.Reason, r.Attempts)
	}
	for _, ev := range events {
		if ev.Outcome != engine.OutcomeLocalError || ev.Demoted {
			t.Fatalf("attempt %d: outcome %v demoted %v, want local_error without demotion", ev.Attempt, ev.Outcome, ev.Demoted)
		}
	}
	st := e.Status()
	if c := st.Counters; c.UpstreamFailed != 3 {
		t.Fatalf("upstream_failed %d, want 3", c.UpstreamFailed)
	}
	if st.Scopes[0].Servers[0].Demoted {
		t.Fatal("the server is demoted for a local bind error")
	}
	if n := len(srv.Queries()); n != 0 {
		t.Fatalf("upstream saw %d queries, want none", n)
	}
}

// attemptRecorder is an Observer that hands attempts to on.
type attemptRecorder struct{ on func(engine.AttemptEvent) }

func (a attemptRecorder) Attempt(ev engine.AttemptEvent) { a.on(ev) }
func (attemptRecorder) Question(engine.QuestionEvent)    {}

// inNetnsEnv marks a test binary that inOwnNetns started.
const inNetnsEnv = "DOHFWD_TEST_IN_NETNS"

// inOwnNetns runs t again, in a network namespace of its own whose
// loopback is up (unshare --net, as root): there ::1 exists when the
// kernel has IPv6 and net.ipv4.ip_nonlocal_bind is 0, whatever this
// machine's namespace says. why is what this namespace lacks. Where no
// namespace can be made, or t still cannot run in it, t ends as
// testtool.Missing says: a failure under CI, a loud skip elsewhere.
func inOwnNetns(t *testing.T, why string) {
	t.Helper()
	if os.Getenv(inNetnsEnv) != "" {
		testtool.Missing(t, "%s, even in a network namespace of its own", why)
		return
	}
	unshare, err := exec.LookPath("unshare")
	ip, err2 := exec.LookPath("ip")
	if err != nil || err2 != nil || os.Geteuid() != 0 {
		testtool.Missing(t, "%s; and no network namespace of its own can be made here (unshare and ip, as root)", why)
		return
	}
	cmd := exec.Command(unshare, "--net", "sh", "-c", ip+` link set lo up && exec "$@"`, "sh",
		os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), inNetnsEnv+"=1")
	out, err := cmd.CombinedOutput()
	switch {
	case err != nil:
		t.Fatalf("%s; in a network namespace of its own: %v\n%s", why, err, out)
	case !strings.Contains(string(out), "--- PASS: "+t.Name()):
		testtool.Missing(t, "%s; in a network namespace of its own it did not pass either:\n%s", why, out)
	default:
		t.Logf("%s; passed in a network namespace of its own:\n%s", why, out)
	}
}
