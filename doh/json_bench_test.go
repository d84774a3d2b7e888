//go:build !wasip1

package doh

import (
	"testing"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
)

// BenchmarkServeJSON is one JSON request through the handler and a real
// engine, answered from its cache after the first: parameters read, the
// query made, the reply written as JSON.
func BenchmarkServeJSON(b *testing.B) {
	up := upstreamtest.Start(b, zone)
	e, err := engine.New(engine.Config{FallbackServers: []string{up.String()}}, engine.Options{Network: engine.NativeNetwork{}})
	if err != nil {
		b.Fatal(err)
	}
	h := NewHandler(e, Options{})
	req := Request{Method: "GET", Path: JSONPath, RawQuery: "name=www.example.test&type=A", Proto: "HTTP/1.1"}
	if resp, ok := h.ServeRequest(b.Context(), &req); !ok || resp.Status != 200 {
		b.Fatalf("status %d", resp.Status)
	}
	b.ReportAllocs()
	for b.Loop() {
		h.ServeRequest(b.Context(), &req)
	}
}
