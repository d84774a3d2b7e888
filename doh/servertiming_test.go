//go:build !wasip1

package doh

import (
	"context"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/enginetest"
	"github.com/miekg/dns"
)

// responseResolver answers every query with a copy of r, its Msg the
// reply to the query.
type responseResolver struct{ r engine.Response }

func (f responseResolver) ResolveMsg(_ context.Context, q *dns.Msg) enginetest.Response {
	return enginetest.Response{Response: f.r, Msg: new(dns.Msg).SetReply(q)}
}

func (f responseResolver) Resolve(ctx context.Context, query, dst []byte) engine.Response {
	return enginetest.ResolveByMsg(f, ctx, query, dst)
}

// Server-Timing says where the answer came from, how many attempts it
// took and how long they took together, in milliseconds.
func TestServerTimingSaysWhereTheTimeWent(t *testing.T) {
	cases := []struct {
		r    engine.Response
		want string
	}{
		{engine.Response{Result: engine.ResultAnswer, Attempts: 2, Upstream: 12345 * time.Microsecond},
			"source;desc=upstream, attempts;desc=2, upstream;dur=12.345"},
		{engine.Response{Result: engine.ResultUnavailable, Attempts: 3, Upstream: 6 * time.Second},
			"source;desc=upstream, attempts;desc=3, upstream;dur=6000"},
		{engine.Response{Result: engine.ResultLocal, CacheHit: true}, "source;desc=cache, attempts;desc=0, upstream;dur=0"},
		{engine.Response{Result: engine.ResultLocal}, "source;desc=local, attempts;desc=0, upstream;dur=0"},
		{engine.Response{Result: engine.ResultAnswer, Shared: true}, "source;desc=shared, attempts;desc=0, upstream;dur=0"},
		{engine.Response{Result: engine.ResultStale, Reason: engine.ReasonAttemptsSpent, Attempts: 3, Upstream: 6 * time.Second},
			"source;desc=stale, attempts;desc=3, upstream;dur=6000"},
	}
	q := new(dns.Msg)
	q.SetQuestion("www.example.org.", dns.TypeA)
	wire, _ := q.Pack()
	for _, c := range cases {
		for _, target := range []string{DefaultPath + "?dns=" + b64(wire), JSONPath + "?name=www.example.org"} {
			w := httptest.NewRecorder()
			NewHandler(responseResolver{c.r}, Options{ServerTiming: true}).ServeHTTP(w, httptest.NewRequest("GET", target, nil))
			if got := w.Header().Get("Server-Timing"); got != c.want {
				t.Errorf("%s: Server-Timing %q, want %q", target, got, c.want)
			}
			// With traceresponse beside it (the two values share one
			// string), both are whole.
			w = httptest.NewRecorder()
			NewHandler(responseResolver{c.r}, Options{ServerTiming: true, TraceContext: true}).ServeHTTP(w, httptest.NewRequest("GET", target, nil))
			if got, tr := w.Header().Get("Server-Timing"), w.Header().Get("Traceresponse"); got != c.want || len(tr) != traceparentLen || tr[:3] != "00-" {
				t.Errorf("%s with trace context: Server-Timing %q, want %q; traceresponse %q", target, got, c.want, tr)
			}
			w = httptest.NewRecorder()
			NewHandler(responseResolver{c.r}, Options{}).ServeHTTP(w, httptest.NewRequest("GET", target, nil))
			if got := w.Header().Values("Server-Timing"); got != nil {
				t.Errorf("%s: switched off, Server-Timing %q", target, got)
			}
		}
	}
	// An answer made here (NOTIMP) asked no one: no Server-Timing.
	q.Opcode = dns.OpcodeStatus
	wire, _ = q.Pack()
	w := httptest.NewRecorder()
	NewHandler(responseResolver{cases[0].r}, Options{ServerTiming: true}).ServeHTTP(w, httptest.NewRequest("GET", DefaultPath+"?dns="+b64(wire), nil))
	if got := w.Header().Values("Server-Timing"); got != nil {
		t.Errorf("NOTIMP: Server-Timing %q", got)
	}
}

// TestAppendMillisAsAppendFloat: the milliseconds are written as
// strconv.AppendFloat writes float64(us)/1000 in its shortest form.
func TestAppendMillisAsAppendFloat(t *testing.T) {
	values := []int64{0, 1, 10, 100, 999, 1000, 1001, 1010, 1100, 12345, 6000000, 123456789, 1 << 40, -1, -1500}
	for i := int64(0); i < 20000; i += 7 {
		values = append(values, i)
	}
	for _, us := range values {
		want := strconv.AppendFloat(nil, float64(us)/1000, 'f', -1, 64)
		if got := appendMillis(nil, us); string(got) != string(want) {
			t.Errorf("%d µs: %q, want %q", us, got, want)
		}
	}
}
