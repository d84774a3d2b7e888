//go:build !wasip1

package doh

import (
	"context"
	"encoding/hex"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/enginetest"
	"github.com/miekg/dns"
)

func TestTraceparentIsReadAsTheRecommendationSays(t *testing.T) {
	const id, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	good := map[string]byte{
		"00-" + id + "-" + parent + "-01":          1,
		"00-" + id + "-" + parent + "-00":          0,
		"01-" + id + "-" + parent + "-01-whatever": 1, // a future version: read as 00
	}
	for v, flags := range good {
		var tr engine.Trace
		if !parseTraceparent(v, &tr) || hex.EncodeToString(tr.ID[:]) != id || hex.EncodeToString(tr.Parent[:]) != parent || tr.Flags != flags {
			t.Errorf("%q: not read (%x %x %x)", v, tr.ID, tr.Parent, tr.Flags)
		}
	}
	bad := []string{
		"", "00-" + id + "-" + parent, "00-" + id + "-" + parent + "-01-extra",
		"ff-" + id + "-" + parent + "-01", "00-" + strings.ToUpper(id) + "-" + parent + "-01",
		"00-" + strings.Repeat("0", 32) + "-" + parent + "-01", "00-" + id + "-" + strings.Repeat("0", 16) + "-01",
		"00-" + id + "-" + parent + "-0g", "00_" + id + "-" + parent + "-01", "01-" + id + "-" + parent + "-01x",
	}
	for _, v := range bad {
		var tr engine.Trace
		if parseTraceparent(v, &tr) {
			t.Errorf("%q: read, want refused", v)
		}
	}
}

// traceResolver records the trace each question came with.
type traceResolver struct{ got *engine.Trace }

func (r *traceResolver) ResolveMsg(ctx context.Context, q *dns.Msg) enginetest.Response {
	if tr := engine.TraceFrom(ctx); tr != nil {
		c := *tr
		r.got = &c
	}
	return enginetest.Response{Msg: new(dns.Msg).SetReply(q), Response: engine.Response{Result: engine.ResultAnswer}}
}

func (r *traceResolver) Resolve(ctx context.Context, query, dst []byte) engine.Response {
	return enginetest.ResolveByMsg(r, ctx, query, dst)
}

// The question reaches the resolver in the caller's trace, and the answer
// says which span this server's was; without traceparent the trace is new.
func TestTraceGoesToTheResolverAndComesBack(t *testing.T) {
	const in = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, traceparent := range []string{in, "", "00-garbage"} {
		res := &traceResolver{}
		h := NewHandler(res, Options{TraceContext: true})
		req := httptest.NewRequest("GET", JSONPath+"?name=www.example.org", nil)
		if traceparent != "" {
			req.Header.Set("traceparent", traceparent)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if res.got == nil {
			t.Fatalf("%q: no trace reached the resolver", traceparent)
		}
		out := w.Header().Get("traceresponse")
		want := "00-" + hex.EncodeToString(res.got.ID[:]) + "-" + hex.EncodeToString(res.got.Span[:]) + "-"
		if !strings.HasPrefix(out, want) || len(out) != traceparentLen {
			t.Fatalf("%q: traceresponse %q, want %s..", traceparent, out, want)
		}
		if traceparent == in {
			if !res.got.HasParent || !strings.HasPrefix(out, in[:36]) || !strings.HasSuffix(out, "-01") ||
				hex.EncodeToString(res.got.Parent[:]) != "00f067aa0ba902b7" || strings.Contains(out, "00f067aa0ba902b7") {
				t.Fatalf("traceparent in, traceresponse %q, trace %+v", out, res.got)
			}
		} else if res.got.HasParent || res.got.ID == [16]byte{} {
			t.Fatalf("%q: trace %+v, want a new one without parent", traceparent, res.got)
		}
	}
	// Switched off: nothing reaches the resolver, nothing comes back.
	res := &traceResolver{}
	w := httptest.NewRecorder()
	req := httptest.NewRequest("GET", JSONPath+"?name=www.example.org", nil)
	req.Header.Set("traceparent", in)
	NewHandler(res, Options{}).ServeHTTP(w, req)
	if res.got != nil || w.Header().Get("traceresponse") != "" {
		t.Fatal("trace context is off but a trace went through")
	}
}
