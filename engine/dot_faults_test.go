package engine_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/enginetest"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
)

// DoT failures on real loopback sockets with real TLS: each fails its
// attempt, demotes the server like a timeout, and names itself in the
// attempt event and the EDE; the next server answers.

// handshakeFailsThenNext runs one question against bad then a good DoT
// server and checks the first attempt's outcome and the demotion.
func handshakeFailsThenNext(t *testing.T, ca *upstreamtest.CA, bad string, want engine.Outcome) {
	t.Helper()
	good := dotServer(t, ca)
	r := newDoTRig(t, ca, []string{bad, good.URL("dns.test")}, nil)
	resp := r.ask("www.example.")
	if resp.Result != engine.ResultAnswer {
		t.Fatalf("result %v, want the second server's answer", resp.Result)
	}
	evs := r.log.attemptList()
	if len(evs) != 2 || evs[0].Outcome != want || !evs[0].Demoted || evs[0].Transport != engine.DoT ||
		evs[1].Outcome != engine.OutcomeAnswer {
		t.Fatalf("attempts %+v, want %v (demoted) then answer", evs, want)
	}
	if sv := r.e.Status().Scopes[0].Servers[0]; !sv.Demoted || sv.Connections.Failed != 1 || sv.Connections.Open != 0 {
		t.Fatalf("bad server's status %+v %+v: want demoted, one failed handshake, none open", sv, sv.Connections)
	}
}

// A certificate for another name: the handshake fails (wrong certificate).
func TestDoTWrongName(t *testing.T) {
	ca := upstreamtest.NewCA(t)
	srv := dotServer(t, ca) // its certificate is for dns.test
	handshakeFailsThenNext(t, ca, srv.URL("other.test"), engine.OutcomeHandshakeError)
}

// An expired certificate from the trusted CA, and a valid one from a CA
// not trusted: both fail the handshake.
func TestDoTExpiredAndUntrustedCertificates(t *testing.T) {
	ca := upstreamtest.NewCA(t)
	expired := upstreamtest.StartDoT(t, ca.Leaf(t, time.Now().Add(-time.Hour), "dns.test"), upstreamtest.Answer("@ 60 IN A 192.0.2.1"))
	handshakeFailsThenNext(t, ca, expired.URL("dns.test"), engine.OutcomeHandshakeError)
	other := upstreamtest.NewCA(t)
	untrusted := upstreamtest.StartDoT(t, other.Leaf(t, time.Now().Add(time.Hour), "dns.test"), upstreamtest.Answer("@ 60 IN A 192.0.2.1"))
	handshakeFailsThenNext(t, ca, untrusted.URL("dns.test"), engine.OutcomeHandshakeError)
}

// A pin none of the chain's keys has fails the handshake of a trusted
// certificate; the right pin (the CA's key, here the leaf's) passes.
func TestDoTPins(t *testing.T) {
	ca := upstreamtest.NewCA(t)
	cert := ca.Leaf(t, time.Now().Add(time.Hour), "dns.test")
	srv := upstreamtest.StartDoT(t, cert, upstreamtest.Answer("@ 60 IN A 192.0.2.1"))
	wrong := srv.URL("dns.test") + "?pin=sha256/47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="
	handshakeFailsThenNext(t, ca, wrong, engine.OutcomeHandshakeError)
	right := srv.URL("dns.test") + "?pin=" + upstreamtest.Pin(cert)
	r := newDoTRig(t, ca, []string{right}, nil)
	if resp := r.ask("www.example."); resp.Result != engine.ResultAnswer {
		t.Fatalf("pinned server: %v", resp.Result)
	}
}

// A refused connection is a connect_error that demotes; the EDE names the
// server and its transport.
func TestDoTRefusedNamedInEDE(t *testing.T) {
	ca := upstreamtest.NewCA(t)
	closed := upstreamtest.ClosedPort(t)
	url := "tls://" + closed.String() + "#dns.test"
	r := newDoTRig(t, ca, []string{url}, nil)
	resp := r.ask("www.example.")
	if resp.Result != engine.ResultUnavailable {
		t.Fatalf("result %v", resp.Result)
	}
	for _, ev := range r.log.attemptList() {
		if ev.Outcome != engine.OutcomeConnectError || !ev.Demoted && ev.Attempt == 1 {
			t.Fatalf("attempt %+v, want connect_error (demoted)", ev)
		}
	}
	text := edeText(resp.Msg)
	if !strings.Contains(text, url+"/dot refused") {
		t.Fatalf("EDE text %q does not name %s/dot refused", text, url)
	}
}

// A server that accepts TCP and never answers the handshake: the connect
// and handshake count inside the attempt, which ends at its own deadline
// as a timeout and demotes (coredns PR #8543: handshakes bounded by the
// retry window); the next server answers within the question.
func TestDoTHandshakeStall(t *testing.T) {
	ca := upstreamtest.NewCA(t)
	stall := upstreamtest.StartStallingTLS(t)
	good := dotServer(t, ca)
	r := newDoTRig(t, ca, []string{"tls://" + stall.String() + "#dns.test", good.URL("dns.test")},
		func(c *engine.Config) { c.TransactionTimeout = 300 * time.Millisecond })
	resp := r.ask("www.example.")
	evs := r.log.attemptList()
	if resp.Result != engine.ResultAnswer || len(evs) != 2 || evs[0].Outcome != engine.OutcomeTimeout || !evs[0].Demoted {
		t.Fatalf("result %v, attempts %+v: want a timeout (demoted) then the answer", resp.Result, evs)
	}
	// The attempt ended at its deadline, not the handshake's own.
	if evs[0].RTT >= time.Second {
		t.Fatalf("the stalled attempt took %v, past its 300ms", evs[0].RTT)
	}
}

// The server closes a connection the engine holds (idle close, restart):
// the engine sees it at once, and the next question opens a new
// connection, resuming the TLS session, without a failed attempt
// (dnsproxy#527: dead pooled connections detected late).
func TestDoTServerClosesIdleConnection(t *testing.T) {
	ca := upstreamtest.NewCA(t)
	srv := dotServer(t, ca)
	srv.CloseIdle(200 * time.Millisecond)
	r := newDoTRig(t, ca, []string{srv.URL("dns.test")}, nil)
	r.ask("one.example.")
	// Wait for the server's idle close to reach the engine.
	waitFor(t, "the server's close to reach the engine", func() bool { return r.connStatus().Open == 0 })
	resp := r.ask("two.example.")
	evs := r.log.attemptList()
	if resp.Result != engine.ResultAnswer || len(evs) != 2 || evs[1].Outcome != engine.OutcomeAnswer || evs[1].Conn != engine.ConnResumed {
		t.Fatalf("after the server's close: %v, attempts %+v: want an answer on a new, resumed connection", resp.Result, evs)
	}
	if srv.Handshakes.Load() != 2 || srv.Resumed.Load() != 1 {
		t.Fatalf("server saw %d handshakes, %d resumed: want 2, 1", srv.Handshakes.Load(), srv.Resumed.Load())
	}
	if cs := r.connStatus(); cs.Handshakes != 2 || cs.Resumed != 1 {
		t.Fatalf("engine counts %+v", cs)
	}
}

// The server drops the connection while questions are in flight on it:
// each goes again on a new connection within its attempt and is
// answered; no attempt fails.
func TestDoTInFlightRetriedOnNewConnection(t *testing.T) {
	ca := upstreamtest.NewCA(t)
	var mu sync.Mutex
	dropped := false
	var srv *upstreamtest.DoTServer
	srv = upstreamtest.StartDoT(t, ca.Leaf(t, time.Now().Add(time.Hour), "dns.test"), func(q upstreamtest.Query) upstreamtest.Action {
		mu.Lock()
		defer mu.Unlock()
		if strings.HasPrefix(q.Msg.Question[0].Name, "drop.") && !dropped {
			dropped = true
			// The queries read so far on this connection die with it.
			return upstreamtest.Action{Close: true}
		}
		return upstreamtest.Action{Replies: []upstreamtest.Reply{{Delay: 100 * time.Millisecond, Msg: upstreamtest.ReplyTo(q.Msg, dns.RcodeSuccess, "@ 60 IN A 192.0.2.1")}}}
	})
	r := newDoTRig(t, ca, []string{srv.URL("dns.test")}, nil)
	r.ask("warm.example.")
	var wg sync.WaitGroup
	names := []string{"a.example.", "b.example.", "drop.example.", "c.example."}
	results := make([]enginetest.Response, len(names))
	for i, n := range names {
		wg.Add(1)
		go func() { defer wg.Done(); results[i] = r.ask(n) }()
		time.Sleep(10 * time.Millisecond)
	}
	wg.Wait()
	for i, res := range results {
		if res.Result != engine.ResultAnswer || res.Attempts != 1 {
			t.Errorf("%s: %v after %d attempts, want an answer in one", names[i], res.Result, res.Attempts)
		}
	}
	if srv.Handshakes.Load() < 2 {
		t.Fatalf("%d handshakes: the questions did not go on a new connection", srv.Handshakes.Load())
	}
}

// A query the server never answers times out at its own deadline while
// other queries keep coming and being answered on the same connection
// (pdns#17707: a read deadline pushed back by every new query never
// fires).
func TestDoTSilentQueryTimesOutDespiteTraffic(t *testing.T) {
	ca := upstreamtest.NewCA(t)
	srv := upstreamtest.StartDoT(t, ca.Leaf(t, time.Now().Add(time.Hour), "dns.test"), func(q upstreamtest.Query) upstreamtest.Action {
		if strings.HasPrefix(q.Msg.Question[0].Name, "silent.") {
			return upstreamtest.Action{}
		}
		return upstreamtest.Action{Replies: []upstreamtest.Reply{{Msg: upstreamtest.ReplyTo(q.Msg, dns.RcodeSuccess, "@ 60 IN A 192.0.2.1")}}}
	})
	r := newDoTRig(t, ca, []string{srv.URL("dns.test")}, func(c *engine.Config) {
		c.TransactionTimeout = 300 * time.Millisecond
		c.Attempts = 1
	})
	r.ask("warm.example.")
	stop := make(chan struct{})
	var traffic sync.WaitGroup
	traffic.Add(1)
	answeredDuring := 0
	go func() {
		defer traffic.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if r.ask(fmt.Sprintf("t%d.example.", i)).Result == engine.ResultAnswer {
				answeredDuring++
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	resp := r.ask("silent.example.")
	close(stop) // the traffic goes on until the silent question ended
	traffic.Wait()
	if resp.Result != engine.ResultUnavailable || answeredDuring == 0 {
		t.Fatalf("silent question: %v with %d answered beside it", resp.Result, answeredDuring)
	}
	var silent *engine.AttemptEvent
	for _, ev := range r.log.attemptList() {
		if ev.QName == "silent.example." {
			silent = &ev
		}
	}
	if silent == nil || silent.Outcome != engine.OutcomeTimeout || silent.Conn != engine.ConnReused {
		t.Fatalf("silent attempt %+v: want a timeout on the reused connection", silent)
	}
	if n := srv.Accepted.Load(); n != 1 {
		t.Fatalf("%d connections: the timeout should not cost the connection", n)
	}
}

// 4096 questions in flight at once to one DoT server are all answered,
// on at most the configured connections (unbound#47: too many).
func TestDoTManyInFlightBoundedConnections(t *testing.T) {
	ca := upstreamtest.NewCA(t)
	srv := upstreamtest.StartDoT(t, ca.Leaf(t, time.Now().Add(time.Hour), "dns.test"), func(q upstreamtest.Query) upstreamtest.Action {
		return upstreamtest.Action{Replies: []upstreamtest.Reply{{Delay: 200 * time.Millisecond, Msg: upstreamtest.ReplyTo(q.Msg, dns.RcodeSuccess, "@ 60 IN A 192.0.2.1")}}}
	})
	r := newDoTRig(t, ca, []string{srv.URL("dns.test")}, func(c *engine.Config) { c.TransactionTimeout = 10 * time.Second })
	const n = 4096
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed := 0
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := enginetest.Resolve(r.e, context.Background(), newQuery(fmt.Sprintf("q%d.example.", i), dns.TypeA))
			if resp.Result != engine.ResultAnswer {
				mu.Lock()
				failed++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if failed > 0 {
		t.Fatalf("%d of %d questions not answered", failed, n)
	}
	if m := srv.MaxOpen.Load(); m > engine.DefaultEncryptedConnections || m < 1 {
		t.Fatalf("%d connections open at once, want at most %d", m, engine.DefaultEncryptedConnections)
	}
	if got := len(srv.Queries()); got != n {
		t.Fatalf("server read %d queries, want %d (one each)", got, n)
	}
}
