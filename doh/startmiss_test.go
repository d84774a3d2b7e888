//go:build !wasip1

package doh

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
	"github.com/miekg/dns"
)

// leavingClient is the engine; once armed, the next question it begins
// (StartMiss) has its client gone right after, before a worker picks the
// question up.
type leavingClient struct {
	*engine.Engine
	armed  atomic.Bool
	starts atomic.Int32 // questions StartMiss began
	misses atomic.Int32 // ResolveMiss calls
}

func (l *leavingClient) StartMiss(ctx context.Context, m *engine.Miss, then engine.MissContinuation) bool {
	// The client's cancel, read before the engine has the question: once
	// the loop took it (true), m and its question context are the loop's.
	cancelOf := ctx
	if qc, ok := ctx.(*engine.QuestionContext); ok { // naming the client's protocol
		cancelOf = qc.Context
	}
	taken := l.Engine.StartMiss(ctx, m, then)
	if !taken && !m.Started() {
		return false
	}
	l.starts.Add(1)
	if cc, ok := cancelOf.(*engine.CancelContext); ok && l.armed.CompareAndSwap(true, false) {
		cc.Cancel()
	}
	return taken
}

func (l *leavingClient) ResolveMiss(ctx context.Context, m *engine.Miss, dst []byte) engine.Response {
	l.misses.Add(1)
	return l.Engine.ResolveMiss(ctx, m, dst)
}

// A question the HTTP/2 reader began upstream (MissStarter) is ended by
// the resolver even when its client left before a worker picked it up:
// its attempt ends cancelled (not charged), and its flight lands, so the
// same question asked again is answered rather than left waiting on a
// flight no one leads.
func TestH2StartedMissEndedAfterClientLeft(t *testing.T) {
	up := upstreamtest.Start(t, zone)
	e, err := engine.New(engine.Config{FallbackServers: []string{up.String()}, Cache: engine.CacheConfig{MaxEntries: -1}},
		engine.Options{Network: engine.NativeNetwork{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	l := &leavingClient{Engine: e}
	base, c := startTLS(t, NewHandler(l, Options{}), Limits{})
	url := base + DefaultPath + "?dns=" + b64(pack(t, query(t, "www.example.test.", dns.TypeA, 0)))
	// The connection first (TLS, HTTP/2 settings), so the leaving
	// question's request reaches the server at once.
	warm := base + DefaultPath + "?dns=" + b64(pack(t, query(t, "web.example.test.", dns.TypeA, 0)))
	if resp, body := do(t, c, newRequest(t, "GET", warm, nil)); len(unpackAnswer(t, resp, body).Answer) != 1 {
		t.Fatal("warm-up question not answered")
	}
	l.armed.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if resp, err := c.Do(newRequest(t, "GET", url, nil).WithContext(ctx)); err == nil {
		resp.Body.Close()
		t.Fatalf("the question whose client left got status %d, want no answer", resp.StatusCode)
	}
	if l.armed.Load() || l.starts.Load() != 2 || l.misses.Load() != 2 {
		t.Fatalf("armed %v, %d begun, %d ended by ResolveMiss; want the leaving question begun and ended",
			l.armed.Load(), l.starts.Load(), l.misses.Load())
	}
	resp, body := do(t, c, newRequest(t, "GET", url, nil))
	if m := unpackAnswer(t, resp, body); len(m.Answer) != 2 {
		t.Fatalf("the same question asked again got %v", m.Answer)
	}
	cn := e.Counters()
	if cn.Attempts["cancelled"] != 1 || cn.UpstreamFailed != 0 {
		t.Fatalf("attempts %v, upstream_failed %d; want one cancelled attempt, none charged", cn.Attempts, cn.UpstreamFailed)
	}
}

var _ http.Handler = (*Handler)(nil)
