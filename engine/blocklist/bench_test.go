package blocklist_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/dohfwd/dohfwd/engine/blocklist"
)

// genList is a generated list of n domains (no downloads), as hosts
// lines.
func genList(n int) []byte {
	var b strings.Builder
	b.Grow(n * 32)
	for i := range n {
		fmt.Fprintf(&b, "0.0.0.0 host%d.tracker%d.example\n", i, i%5000)
	}
	return []byte(b.String())
}

// BenchmarkCompile1M: a 1 000 000-domain list compiled; reports the heap
// the Set keeps (MiB) besides the time.
func BenchmarkCompile1M(b *testing.B) {
	files := blocklist.MapFiles{"l": genList(1_000_000)}
	var s *blocklist.Set
	for b.Loop() {
		var err error
		s, err = blocklist.Compile(blocklist.Spec{Name: "p", Block: []string{"l"}}, blocklist.Options{Files: files})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	var before, after runtime.MemStats
	s = nil
	runtime.GC()
	runtime.ReadMemStats(&before)
	s, _ = blocklist.Compile(blocklist.Spec{Name: "p", Block: []string{"l"}}, blocklist.Options{Files: files})
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "MiB-kept")
	runtime.KeepAlive(s)
}

// BenchmarkMatch1M: one question against a 1M-domain Set, blocked and
// passed; compare with BenchmarkMatchEmpty (no policy).
func BenchmarkMatch1M(b *testing.B) {
	s, _ := compile(b, blocklist.Spec{Name: "p", Block: []string{"l"}}, map[string]string{"l": string(genList(1_000_000))})
	for _, name := range []string{"host77.tracker77.example.", "www.Some-Site.example.com."} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				s.Match(name)
			}
		})
	}
}
