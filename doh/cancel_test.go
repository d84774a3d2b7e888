//go:build !wasip1

package doh

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
	"github.com/miekg/dns"
)

// TestClientCancelNotCharged: an HTTP/2 client that resets its stream
// while the engine waits on a silent upstream cancels the question; the
// engine counts it cancelled, charges nothing to the server and demotes
// nothing: the client's context is the first of a transaction's three
// time budgets (engine/budget_test.go).
func TestClientCancelNotCharged(t *testing.T) {
	t.Parallel()
	up := upstreamtest.Start(t, upstreamtest.Drop())
	e, err := engine.New(engine.Config{FallbackServers: []string{up.String()}}, engine.Options{Network: engine.NativeNetwork{}})
	if err != nil {
		t.Fatal(err)
	}
	var seen exchanges
	base, c := startTLS(t, NewHandler(e, Options{Observe: seen.observe}), Limits{})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req := newRequest(t, "GET", base+DefaultPath+"?dns="+b64(pack(t, query(t, "slow.example.test.", dns.TypeA, 0))), nil).WithContext(ctx)
	errc := doInBackground(c, req)

	// Cancel once the upstream holds the query: the engine is waiting.
	waitFor(t, "the upstream to read the query", func() bool { return len(up.Queries()) == 1 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("client: %v, want context.Canceled", err)
	}
	// The attempt is counted cancelled when it ends, the question a moment
	// later when it answers: wait for the second.
	waitFor(t, "the engine to count the question cancelled", func() bool {
		return e.Counters().Cancelled == 1 && e.Status().Counters.Questions["cancelled"] == 1
	})

	st := e.Status()
	if st.Counters.UpstreamFailed != 0 || st.Counters.Attempts["timeout"] != 0 || st.Counters.Attempts["cancelled"] != 1 {
		t.Errorf("counters after a client cancel: %+v", st.Counters)
	}
	if st.Counters.Questions["cancelled"] != 1 {
		t.Errorf("questions by result: %v", st.Counters.Questions)
	}
	for _, s := range st.Scopes {
		for _, sv := range s.Servers {
			if sv.Demoted {
				t.Errorf("server %s demoted by a client cancel", sv.Address)
			}
		}
	}
	if n := len(up.Queries()); n != 1 {
		t.Errorf("upstream read %d queries, want 1: no further attempt after the cancel", n)
	}
	waitFor(t, "Observe", func() bool { seen.mu.Lock(); defer seen.mu.Unlock(); return len(seen.list) == 1 })
	if x := seen.last(t); x.Status != StatusClientClosed || !x.Resolved || x.Response.Result != engine.ResultCancelled {
		t.Errorf("Observe saw status %d resolved %v result %v", x.Status, x.Resolved, x.Response.Result)
	}
	if e.InFlight() != 0 {
		t.Errorf("in flight %d after the cancel", e.InFlight())
	}
}

// waitFor polls cond (real sockets are involved, so no synctest) for up
// to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
