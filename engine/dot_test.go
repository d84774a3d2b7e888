package engine_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/enginetest"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
)

// dotRig is an engine on real loopback sockets whose servers include DoT
// ones, verified against a test CA.
type dotRig struct {
	t   *testing.T
	ca  *upstreamtest.CA
	e   *engine.Engine
	log *eventLog
}

// newDoTRig builds an engine for servers (as configured) with the test
// CA's roots; tweak, when set, changes the configuration first.
func newDoTRig(t *testing.T, ca *upstreamtest.CA, servers []string, tweak func(*engine.Config)) *dotRig {
	t.Helper()
	cfg := engine.Config{Scopes: []engine.ScopeConfig{{Name: "main", DefaultRoute: true, Servers: servers}},
		UpstreamCookies: true, Upstream0x20: true}
	if tweak != nil {
		tweak(&cfg)
	}
	r := &dotRig{t: t, ca: ca, log: &eventLog{}}
	e, err := engine.New(cfg, engine.Options{Network: engine.NativeNetwork{TLS: engine.NewUpstreamTLS(ca.Pool())}, Observer: r.log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	r.e = e
	return r
}

func (r *dotRig) ask(name string) enginetest.Response {
	return enginetest.Resolve(r.e, context.Background(), newQuery(name, dns.TypeA))
}

// dotServer is a DoT server for "dns.test" signed by ca, answering A
// 192.0.2.1 to everything.
func dotServer(t *testing.T, ca *upstreamtest.CA) *upstreamtest.DoTServer {
	return upstreamtest.StartDoT(t, ca.Leaf(t, time.Now().Add(time.Hour), "dns.test"), upstreamtest.Answer("@ 60 IN A 192.0.2.1"))
}

// connStatus is the status of the rig's first server's connections.
func (r *dotRig) connStatus() engine.ConnStatus {
	sv := r.e.Status().Scopes[0].Servers[0]
	if sv.Connections == nil {
		r.t.Fatalf("server %s has no connections in status", sv.Address)
	}
	return *sv.Connections
}

// A DoT server answers; the attempt event says dot and whether its
// connection was new, then reused; questions follow one another on one
// connection (no reconnect per question: unbound#1271, pdns#14914);
// status shows the transport and the connection's counters.
func TestDoTAnswersOnOneConnection(t *testing.T) {
	ca := upstreamtest.NewCA(t)
	srv := dotServer(t, ca)
	r := newDoTRig(t, ca, []string{srv.URL("dns.test")}, nil)
	for i := range 5 {
		resp := r.ask("www.example.")
		if resp.Result != engine.ResultAnswer || len(resp.Msg.Answer) != 1 {
			t.Fatalf("question %d: %v %v", i, resp.Result, resp.Msg)
		}
	}
	evs := r.log.attemptList()
	if len(evs) != 5 {
		t.Fatalf("%d attempts, want 5", len(evs))
	}
	for i, ev := range evs {
		want := engine.ConnReused
		if i == 0 {
			want = engine.ConnNew
		}
		if ev.Transport != engine.DoT || ev.Conn != want || ev.Outcome != engine.OutcomeAnswer {
			t.Errorf("attempt %d: %v %v %v, want dot %v answer", i, ev.Transport, ev.Conn, ev.Outcome, want)
		}
	}
	if n := srv.Accepted.Load(); n != 1 {
		t.Fatalf("the server accepted %d connections for 5 questions, want 1", n)
	}
	sv := r.e.Status().Scopes[0].Servers[0]
	if sv.Transport != "dot" || sv.Address != srv.URL("dns.test")[:6]+srv.Addr().String()+"#dns.test" {
		t.Fatalf("status: %+v", sv)
	}
	if cs := r.connStatus(); cs.Open != 1 || cs.Handshakes != 1 || cs.Reused != 4 {
		t.Fatalf("connections: %+v, want 1 open, 1 handshake, 4 reused", cs)
	}
}

// Queries on encrypted transports are padded to 128-octet blocks (RFC
// 8467 §4.1) and carry no DNS cookie and no 0x20 (on for plain servers
// here).
func TestDoTQueryPaddedNoCookieNo0x20(t *testing.T) {
	ca := upstreamtest.NewCA(t)
	srv := dotServer(t, ca)
	r := newDoTRig(t, ca, []string{srv.URL("dns.test")}, nil)
	r.ask("www.example.")
	qs := srv.Queries()
	if len(qs) != 1 || qs[0].Msg == nil {
		t.Fatalf("queries: %v", qs)
	}
	m := qs[0].Msg
	wire, _ := m.Pack()
	if len(wire)%128 != 0 {
		t.Errorf("query is %d bytes, not a multiple of 128", len(wire))
	}
	opt := m.IsEdns0()
	if opt == nil {
		t.Fatal("no OPT")
	}
	padded := false
	for _, o := range opt.Option {
		switch o.(type) {
		case *dns.EDNS0_COOKIE:
			t.Error("the query carries a cookie")
		case *dns.EDNS0_PADDING:
			padded = true
		}
	}
	if !padded {
		t.Error("no padding option")
	}
	if q := m.Question[0].Name; q != "www.example." {
		t.Errorf("asked %q: 0x20 on a DoT server", q)
	}
}

// Replies taken out of order on one connection, each matched to its
// question by ID and question (dnsproxy PR #269): the first question's
// reply comes last.
func TestDoTPipelinedOutOfOrder(t *testing.T) {
	ca := upstreamtest.NewCA(t)
	srv := upstreamtest.StartDoT(t, ca.Leaf(t, time.Now().Add(time.Hour), "dns.test"), func(q upstreamtest.Query) upstreamtest.Action {
		d := 10 * time.Millisecond
		if strings.HasPrefix(q.Msg.Question[0].Name, "slow.") {
			d = 400 * time.Millisecond
		}
		return upstreamtest.Action{Replies: []upstreamtest.Reply{{Delay: d, Msg: upstreamtest.ReplyTo(q.Msg, dns.RcodeSuccess, "@ 60 IN TXT \""+q.Msg.Question[0].Name+"\"")}}}
	})
	r := newDoTRig(t, ca, []string{srv.URL("dns.test")}, nil)
	r.ask("warm.example.") // the connection
	var wg sync.WaitGroup
	names := []string{"slow.example.", "a.example.", "b.example.", "c.example."}
	got := make([]enginetest.Response, len(names))
	for i, n := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = enginetest.Resolve(r.e, context.Background(), newQuery(n, dns.TypeTXT))
		}()
		if i == 0 {
			time.Sleep(50 * time.Millisecond) // slow's query leaves first
		}
	}
	wg.Wait()
	for i, n := range names {
		if got[i].Result != engine.ResultAnswer || len(got[i].Msg.Answer) != 1 ||
			got[i].Msg.Answer[0].(*dns.TXT).Txt[0] != n {
			t.Errorf("%s: %v %v", n, got[i].Result, got[i].Msg.Answer)
		}
	}
	if n := srv.Accepted.Load(); n != 1 {
		t.Errorf("%d connections, want 1", n)
	}
}
