package engine_test

import (
	"context"
	"testing"

	"github.com/dohfwd/dohfwd/engine"
)

// BenchmarkResolveInMemoryTraced is BenchmarkResolveInMemory with a trace
// on every question, as the DoH front end hands it over.
func BenchmarkResolveInMemoryTraced(b *testing.B) {
	tr := engine.Trace{ID: [16]byte{1}, Span: [8]byte{2}, Parent: [8]byte{3}, HasParent: true}
	benchmarkResolveInMemory(b, engine.WithTrace(context.Background(), tr))
}
