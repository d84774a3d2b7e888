//go:build !wasip1

package doh

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/miekg/dns"
)

// fixedResolver returns the same reply every time, so the benchmark
// measures the front end alone.
type fixedResolver struct{ reply []byte }

func (f fixedResolver) Resolve(_ context.Context, query, dst []byte) engine.Response {
	out := append(dst, f.reply...)
	copy(out[len(dst):], query[:2]) // the query's ID
	ttl, ok := engine.WireTTL(f.reply)
	return engine.Response{Wire: out, Rcode: int(f.reply[3] & 0xF), TTL: ttl, Cacheable: ok, Result: engine.ResultAnswer}
}

func benchHandler(b testing.TB) (http.Handler, string) {
	q := new(dns.Msg)
	q.SetQuestion("www.example.org.", dns.TypeA)
	q.Id = 0
	reply := new(dns.Msg)
	reply.SetReply(q)
	reply.RecursionAvailable = true
	for _, s := range []string{"www.example.org. 300 IN A 192.0.2.1", "www.example.org. 300 IN A 192.0.2.2"} {
		rr, _ := dns.NewRR(s)
		reply.Answer = append(reply.Answer, rr)
	}
	wire, _ := q.Pack()
	packed, _ := reply.Pack()
	return NewHandler(fixedResolver{packed}, Options{}), DefaultPath + "?dns=" + b64(wire)
}

// BenchmarkServeWire is one RFC 8484 GET through the handler: decode,
// check, resolve (a fixed reply), pack, headers, write.
func BenchmarkServeWire(b *testing.B) {
	h, target := benchHandler(b)
	req := httptest.NewRequest("GET", target, nil)
	req.Header.Set("Accept", MediaTypeDNS)
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != 200 {
			b.Fatalf("status %d", w.Code)
		}
	}
}

// BenchmarkServeWireObserved is the same with an Observe hook, which adds
// the client address and timing.
func BenchmarkServeWireObserved(b *testing.B) {
	_, target := benchHandler(b)
	hb, _ := benchHandler(b)
	h := hb.(*Handler)
	h.observe = func(Exchange) {}
	req := httptest.NewRequest("GET", target, nil)
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
	}
}

// discardWriter is a ResponseWriter that reuses its header map, so the
// benchmark below counts the handler's own allocations only.
type discardWriter struct {
	h      http.Header
	status int
}

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) WriteHeader(s int)           { d.status = s }
func (d *discardWriter) Write(b []byte) (int, error) { return len(b), nil }

// BenchmarkServeWireHandlerOnly is BenchmarkServeWire without the
// recorder's own allocations.
func BenchmarkServeWireHandlerOnly(b *testing.B) {
	h, target := benchHandler(b)
	req := httptest.NewRequest("GET", target, nil)
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(w, req)
		if w.status != 200 {
			b.Fatalf("status %d", w.status)
		}
	}
}

// BenchmarkServeWireOperatorHeaders is BenchmarkServeWireHandlerOnly with
// Server-Timing and trace context on (a traceparent read, the trace handed
// to the resolver, traceresponse written): their cost is the difference.
func BenchmarkServeWireOperatorHeaders(b *testing.B) {
	hb, target := benchHandler(b)
	h := hb.(*Handler)
	h.serverTiming, h.traceContext = true, true
	req := httptest.NewRequest("GET", target, nil)
	req.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(w, req)
		if w.status != 200 {
			b.Fatalf("status %d", w.status)
		}
	}
}
