package syncbuf

import (
	"strings"
	"sync"
	"testing"
)

// Concurrent writers and a reader (run with -race): every write is kept
// whole.
func TestConcurrentWritesKeptWhole(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				b.Write([]byte("line\n"))
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if got := b.String(); got != strings.Repeat("line\n", 800) {
		t.Fatalf("got %d bytes, want 800 whole lines", len(got))
	}
}
