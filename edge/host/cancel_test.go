package host

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/doh/assembly"
	"github.com/dohfwd/dohfwd/edge/abi"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
)

// "A client that goes away cancels its question" and "not charged to the
// server" (engine/budget_test.go), through the module (the host's front end hands it the
// question, abi.EventQuery, and cancels it with EventCancel): the client gives up on a question
// whose server stays silent; the module's engine counts the transaction
// cancelled (not a timeout, not upstream_failed), does not demote the
// server, makes no further attempt, and the instance is free at once for
// the next request.
//
// Over UDP the module is blocked in sock_recv on a UDP socket when the
// client goes; after a truncated reply, on a TCP connection; run TCP-only
// (as on Workers), on the started TCP question's connection, which no
// goroutine waits on (the poll's).
func TestWazeroClientCancelNotCharged(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		silent  upstreamtest.Handler // for the abandoned question
		tried   map[string]uint64    // attempts before the cancelled one
		asked   int                  // queries the server reads for it
		tcpOnly bool
	}{
		{"udp", upstreamtest.Drop(), nil, 1, false},
		{"tcp after truncation", upstreamtest.ByTransport(upstreamtest.Truncated(), upstreamtest.Drop()), map[string]uint64{"truncated": 1}, 2, false},
		{"tcp only", upstreamtest.Drop(), nil, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rt := testRuntime(t)
			if tc.tcpOnly {
				rt = tcpOnlyRuntime(t)
			}
			clientCancelNotCharged(t, rt, tc.silent, tc.tried, tc.asked)
		})
	}
}

// It returns the edge it served the questions with.
func clientCancelNotCharged(t *testing.T, rt *Runtime, silent upstreamtest.Handler, tried map[string]uint64, asked int) *edge {
	// One server: silent for the question the client abandons, answering
	// every other, so the follow-up question shows whether the server was
	// demoted and whether the instance was freed.
	up := upstreamtest.Start(t, func(q upstreamtest.Query) upstreamtest.Action {
		if q.Msg != nil && len(q.Msg.Question) == 1 && strings.EqualFold(q.Msg.Question[0].Name, "silent.example.org.") {
			return silent(q)
		}
		return upstreamtest.Answer("@ 60 IN A 192.0.2.1")(q)
	})
	e := startEdgeOn(t, rt, edgeConfig(up), 1, assembly.Options{LogTo: io.Discard}, nil) // one instance: the next request needs this one

	wire, err := query("silent.example.org", dns.TypeA).Pack()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", e.url+"/dns-query?dns="+base64.RawURLEncoding.EncodeToString(wire), nil)
	req.Header.Set("Accept", "application/dns-message")
	in := e.pool.all[0]
	go func() {
		// Cancel once the question is under way upstream and the module
		// is blocked in sock_recv for it (both waited for, not slept on;
		// the bound only ends a test that is failing anyway, so it is
		// far above the milliseconds this takes even on a loaded machine).
		deadline := time.Now().Add(60 * time.Second)
		for len(up.Queries()) < asked || in.receiving.Load() == 0 {
			if time.Now().After(deadline) {
				t.Errorf("the abandoned question never got under way: upstream read %d queries, want %d, with the module's read waiting", len(up.Queries()), asked)
				break
			}
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	resp, err := e.client.Do(req)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("the abandoned request got HTTP %d; want the client's cancellation", resp.StatusCode)
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned request: %v; want context.Canceled", err)
	}
	cancelledAt := time.Now()

	// The instance must be free well before the 2 s transaction timeout:
	// the next question, to the same server, is answered within 1 s.
	// (Without the cancellation reaching the module it waits the
	// silent question's three 2 s attempts out.)
	next, stop := context.WithTimeout(context.Background(), 8*time.Second)
	defer stop()
	wire, _ = query("next.example.org", dns.TypeA).Pack()
	req, _ = http.NewRequestWithContext(next, "GET", e.url+"/dns-query?dns="+base64.RawURLEncoding.EncodeToString(wire), nil)
	req.Header.Set("Accept", "application/dns-message")
	m, _ := e.do(t, req)
	wantAnswer(t, m, "192.0.2.1")
	if took := time.Since(cancelledAt); took >= time.Second {
		t.Errorf("the next question was answered %v after the cancel; want the instance free at once (< 1 s)", took)
	} else {
		t.Logf("next question answered %v after the cancel", took)
	}

	// The cancel reaches the engine once the abandoned request's goroutine
	// has seen its context end, which on a loaded machine may come after
	// the next question's answer: wait for the engine to have nothing in
	// flight (bounded; a cancel lost would show as timeouts within it).
	st := e.status(t)
	for deadline := time.Now().Add(30 * time.Second); (st.InFlight != 0 || e.pool.InFlight() != 0) && time.Now().Before(deadline); st = e.status(t) {
		time.Sleep(5 * time.Millisecond)
	}
	c := st.Counters
	if c.Cancelled != 1 || c.Attempts["cancelled"] != 1 {
		t.Errorf("cancelled %d, attempts %v: want one cancelled transaction", c.Cancelled, c.Attempts)
	}
	for k, n := range tried {
		if c.Attempts[k] != n {
			t.Errorf("attempts %v: want %d %s before the cancel", c.Attempts, n, k)
		}
	}
	if c.UpstreamFailed != 0 || c.Attempts["timeout"] != 0 || c.Attempts["recv_error"] != 0 {
		t.Errorf("upstream_failed %d, attempts %v: the cancel must not be charged to the server", c.UpstreamFailed, c.Attempts)
	}
	if c.Questions["cancelled"] != 1 || c.Questions["answer"] != 1 {
		t.Errorf("questions %v: want one cancelled, one answered", c.Questions)
	}
	if srv := st.Scopes[0].Servers[0]; srv.Demoted {
		t.Errorf("server %+v demoted by a client's cancel", srv)
	}
	if st.InFlight != 0 || e.pool.InFlight() != 0 {
		t.Errorf("in flight: engine %d, pool %d; want 0", st.InFlight, e.pool.InFlight())
	}
	// Both came to the module as questions from the host's front end
	// (EventQuery), the abandoned one cancelled by EventCancel. The
	// abandoned one's wait ended by the cancel (UDP) or by its truncated
	// reply, so it went on on a worker; the next was finished in a poll.
	if q := e.queryCounts(t); q.Waited != 1 || q.Finished != 1 || q.AtOnce != 0 {
		t.Errorf("questions the module answered: %+v; want both from the host's front end, one on a worker, one finished in a poll", q)
	}
	// No further attempt after the cancel: the server read the abandoned
	// question's queries, then the next question's one.
	if n := len(up.Queries()); n != asked+1 {
		t.Errorf("upstream read %d queries, want %d (no attempt after the cancel)", n, asked+1)
	}
	return e
}

// A joined follower (engine.JoinFlight: no goroutine in the module) whose
// client goes away: EventCancel ends it cancelled at once, with nothing
// charged, and the instance goes on (its leader is answered; the cancel,
// which the module handles under its requests' lock, does not deliver
// inside that lock).
func TestWazeroJoinedFollowerCancelNotCharged(t *testing.T) {
	t.Parallel()
	up := upstreamtest.Start(t, upstreamtest.Delay(1500*time.Millisecond, upstreamtest.Answer("@ 60 IN A 192.0.2.1")))
	e := startEdge(t, edgeConfig(up), 1)
	leader := make(chan error, 1)
	go func() {
		_, err := ask(context.Background(), e.pool, "joined.example.org")
		leader <- err
	}()
	for deadline := time.Now().Add(60 * time.Second); len(up.Queries()) < 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the leader never got under way")
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	followed := make(chan time.Time, 1)
	go func() {
		ask(ctx, e.pool, "joined.example.org")
		followed <- time.Now()
	}()
	// The follower reaches the module: both questions registered and no
	// event left for a poll to take.
	in := e.pool.instances()[0]
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(time.Millisecond) {
		in.mu.Lock()
		handed := len(in.calls) == 2 && len(in.events) == 0
		in.mu.Unlock()
		if handed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the follower never reached the module")
		}
	}
	cancel()
	cancelledAt := time.Now()
	if took := (<-followed).Sub(cancelledAt); took > 500*time.Millisecond {
		t.Errorf("the cancelled follower returned %v after its cancel; want at once", took)
	}
	if err := <-leader; err != nil {
		t.Fatalf("leader: %v", err)
	}
	// The module delivers the cancelled follower within its next poll.
	var c abi.QueryCounts
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if c = e.queryCounts(t); c.Joined == 1 || time.Now().After(deadline) {
			break
		}
	}
	if c != (abi.QueryCounts{Finished: 1, Joined: 1}) {
		t.Fatalf("questions the module answered: %+v; want the leader finished in a poll, the follower joined", c)
	}
	st := e.status(t).Counters
	if st.Questions["cancelled"] != 1 || st.Questions["answer"] != 1 || st.Attempts["cancelled"] != 0 || st.UpstreamFailed != 0 {
		t.Fatalf("questions %v, attempts %v, upstream_failed %d: want one cancelled question, nothing charged", st.Questions, st.Attempts, st.UpstreamFailed)
	}
	if n := len(up.Queries()); n != 1 {
		t.Fatalf("the upstream read %d queries; want the leader's one", n)
	}
}
