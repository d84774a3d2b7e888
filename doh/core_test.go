//go:build !wasip1

package doh

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/miekg/dns"
)

// The core serves both transports: these tests ask over the HTTP/2
// server what main's net/http handler did alone (setup pages, operator
// headers, Admit), so the HTTP/2 path is proven to have them too.

// laterResolver answers bytes, and never at once: every question goes
// through a goroutine. It counts what it was asked.
type laterResolver struct {
	immediateResolver
	immediate, wire atomic.Int64
}

func (r *laterResolver) AnswerNow([]byte, []byte, *engine.Trace, *engine.Miss) (engine.Response, bool) {
	r.immediate.Add(1)
	return engine.Response{}, false
}

func (r *laterResolver) Resolve(ctx context.Context, query, dst []byte) engine.Response {
	r.wire.Add(1)
	return r.immediateResolver.Resolve(ctx, query, dst)
}

func replyFor(name string) *dns.Msg {
	q := new(dns.Msg)
	q.SetQuestion(name, dns.TypeA)
	m := new(dns.Msg)
	m.SetReply(q)
	rr, _ := dns.NewRR(name + " 120 IN A 192.0.2.1")
	m.Answer = append(m.Answer, rr)
	return m
}

// TestHTTP2SetupPages: GET / from a browser and the Apple profile path
// reach Options.Setup over HTTP/2 too, with what it wrote (status,
// headers, body); the request it sees has the host asked.
func TestHTTP2SetupPages(t *testing.T) {
	t.Parallel()
	var host atomic.Value
	setup := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host.Store(r.Host)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write([]byte("<p>setup " + r.URL.Path + "</p>"))
	})
	base, c := startTLS(t, NewHandler(new(recordingResolver), Options{Setup: setup}), Limits{})
	r, body := do(t, c, newRequest(t, "GET", base+"/", nil, "Accept", "text/html"))
	if r.ProtoMajor != 2 || r.StatusCode != 200 || string(body) != "<p>setup /</p>" ||
		r.Header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("GET /: %s %d %q %q", r.Proto, r.StatusCode, r.Header.Get("Content-Type"), body)
	}
	if h, _ := host.Load().(string); !strings.HasPrefix(h, "127.0.0.1:") {
		t.Errorf("setup saw host %q", h)
	}
	if r, body := do(t, c, newRequest(t, "GET", base+SetupProfilePath, nil)); r.StatusCode != 200 ||
		string(body) != "<p>setup "+SetupProfilePath+"</p>" {
		t.Errorf("GET %s: %d %q", SetupProfilePath, r.StatusCode, body)
	}
	if r, _ := do(t, c, newRequest(t, "GET", base+"/", nil, "Accept", "*/*")); r.StatusCode != http.StatusNotFound {
		t.Errorf("GET / without text/html: %d, want 404", r.StatusCode)
	}
}

// TestHTTP2OperatorHeadersOnImmediateAnswers: a cache hit answered on the
// connection's goroutine carries Server-Timing (source cache) and a
// traceresponse in the caller's trace.
func TestHTTP2OperatorHeadersOnImmediateAnswers(t *testing.T) {
	t.Parallel()
	res := newImmediateResolver(replyFor("h.example."))
	h := NewHandler(res, Options{ServerTiming: true, TraceContext: true})
	base, c := startTLS(t, h, Limits{})
	const trace = "4bf92f3577b34da6a3ce929d0e0e4736"
	r, _ := do(t, c, newRequest(t, "GET", base+getPath(t, "h.example."), nil,
		"traceparent", "00-"+trace+"-00f067aa0ba902b7-01"))
	if r.StatusCode != 200 {
		t.Fatalf("status %d", r.StatusCode)
	}
	if got := r.Header.Get("Server-Timing"); got != "source;desc=cache, attempts;desc=0, upstream;dur=0" {
		t.Errorf("Server-Timing %q", got)
	}
	if got := r.Header.Get("Traceresponse"); !strings.HasPrefix(got, "00-"+trace+"-") || strings.Contains(got, "00f067aa0ba902b7") {
		t.Errorf("traceresponse %q: want the caller's trace and a span of this server's", got)
	}
}

// TestHTTP2AdmitOncePerQuestion: Admit is asked once for a question that
// the resolver could not answer at once (asked at once, then on a
// goroutine); a refused client gets 429 with Retry-After over HTTP/2 and
// the resolver is not asked at all.
func TestHTTP2AdmitOncePerQuestion(t *testing.T) {
	t.Parallel()
	res := &laterResolver{immediateResolver: newImmediateResolver(replyFor("h.example."))}
	var admits atomic.Int64
	var refuse atomic.Bool
	admit := func(ip netip.Addr) (bool, time.Duration) {
		admits.Add(1)
		if !ip.IsLoopback() {
			t.Errorf("Admit asked for %v", ip)
		}
		return !refuse.Load(), 1500 * time.Millisecond
	}
	base, c := startTLS(t, NewHandler(res, Options{Admit: admit}), Limits{})
	r, _ := do(t, c, newRequest(t, "GET", base+getPath(t, "h.example."), nil))
	if r.ProtoMajor != 2 || r.StatusCode != 200 {
		t.Fatalf("%s %d", r.Proto, r.StatusCode)
	}
	if a, i, w := admits.Load(), res.immediate.Load(), res.wire.Load(); a != 1 || i != 1 || w != 1 {
		t.Errorf("Admit asked %d times, at once %d, on a goroutine %d: want 1, 1, 1", a, i, w)
	}
	refuse.Store(true)
	r, _ = do(t, c, newRequest(t, "GET", base+getPath(t, "h.example."), nil))
	if r.StatusCode != http.StatusTooManyRequests || r.Header.Get("Retry-After") != "2" {
		t.Errorf("refused: %d Retry-After %q, want 429 and 2", r.StatusCode, r.Header.Get("Retry-After"))
	}
	if i, w := res.immediate.Load(), res.wire.Load(); i != 1 || w != 1 {
		t.Errorf("a refused question reached the resolver (at once %d, on a goroutine %d)", i, w)
	}
}

// TestObservedQNameOfPlainQueries: a plain query's name is made only for
// the observer, at the end: taken from the resolver's response when it
// gives one, else read from the query, also when the resolver was never
// asked (a refused client).
func TestObservedQNameOfPlainQueries(t *testing.T) {
	q := pack(t, query(t, "Mixed-Case.example.", dns.TypeAAAA, 0))
	for _, c := range []struct {
		name   string
		admit  bool
		status int
	}{{"resolved", true, 200}, {"refused", false, http.StatusTooManyRequests}} {
		var seen exchanges
		h := NewHandler(newImmediateResolver(replyFor("mixed-case.example.")), Options{Observe: seen.observe,
			Admit: func(netip.Addr) (bool, time.Duration) { return c.admit, time.Second }})
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", DefaultPath+"?dns="+b64(q), nil))
		x := seen.last(t)
		if x.Status != c.status || x.QName != "Mixed-Case.example." || x.QType != dns.TypeAAAA {
			t.Errorf("%s: observed %d %q/%d, want %d Mixed-Case.example./AAAA", c.name, x.Status, x.QName, x.QType, c.status)
		}
	}
	// The engine names the question as the request did.
	e, err := engine.New(engine.Config{FallbackServers: []string{"127.0.0.1:1"}, TransactionTimeout: 50 * time.Millisecond},
		engine.Options{Network: engine.NativeNetwork{}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if r := e.Resolve(context.Background(), q, nil); r.QName != "Mixed-Case.example." {
		t.Errorf("engine Response.QName %q", r.QName)
	}
}

// answeredAtResolver answers from a goroutine, saying it answered at a
// fixed moment.
type answeredAtResolver struct {
	laterResolver
	at time.Time
}

func (r *answeredAtResolver) Resolve(ctx context.Context, query, dst []byte) engine.Response {
	resp := r.laterResolver.Resolve(ctx, query, dst)
	resp.Answered = r.at
	return resp
}

// TestHTTP2TakesTheResolversAnswerTime: an answer from the resolver's
// goroutine carries the time the resolver answered (Response.Answered)
// as its Date, and the exchange observed ends then: the server reads no
// clock of its own for either.
func TestHTTP2TakesTheResolversAnswerTime(t *testing.T) {
	t.Parallel()
	var seen exchanges
	at := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	r := &answeredAtResolver{laterResolver{immediateResolver: newImmediateResolver(replyFor("www.example."))}, at}
	base, c := startTLS(t, NewHandler(r, Options{Observe: seen.observe}), Limits{})
	q := pack(t, query(t, "www.example.", dns.TypeA, 0))
	resp, _ := do(t, c, newRequest(t, "GET", base+DefaultPath+"?dns="+b64(q), nil))
	if resp.StatusCode != 200 || r.wire.Load() != 1 {
		t.Fatalf("status %d, %d questions from a goroutine", resp.StatusCode, r.wire.Load())
	}
	if got := resp.Header.Get("Date"); got != "Thu, 02 Jan 2020 03:04:05 GMT" {
		t.Errorf("Date %q, want the resolver's answer time", got)
	}
	if x := seen.last(t); x.Duration != at.Sub(x.Start) {
		t.Errorf("observed duration %v, want %v (until the resolver's answer time)", x.Duration, at.Sub(x.Start))
	}
}
