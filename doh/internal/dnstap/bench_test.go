package dnstap

import (
	"net"
	"path/filepath"
	"testing"
	"time"

	dnstappb "github.com/dnstap/golang-dnstap"
	"github.com/rs/zerolog"
)

// BenchmarkWriterTap hands the writer one message per op while it writes
// to golang-dnstap's Frame Streams reader on a Unix socket: ns/op and
// allocs/op are the question goroutine's cost (the copy and the queue);
// the writer's encoding runs on its own goroutine, in the CPU of the run.
// It reports the share of messages dropped (the writer is slower than
// the loop, which fills the queue of 10 000) and the messages per second
// the writer wrote until the queue was empty. Figures only; nothing is
// asserted.
func BenchmarkWriterTap(b *testing.B) {
	socket := filepath.Join(b.TempDir(), "tap.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		b.Fatal(err)
	}
	in := dnstappb.NewFrameStreamSockInput(ln)
	frames := make(chan []byte, 1024)
	go in.ReadInto(frames)
	go func() {
		for range frames {
		}
	}()
	w := New(Config{Network: "unix", Address: socket, Queue: 10000, Identity: "bench", Version: "dohfwd bench", Log: zerolog.Nop()})
	defer w.Close()
	m := testMessage(1)
	m.Response = make([]byte, 120) // a reply of a typical size
	// Wait for the connection: one message through.
	w.Tap(m)
	for sent, _ := w.Counters(); sent == 0; sent, _ = w.Counters() {
		time.Sleep(time.Millisecond)
	}
	sent0, dropped0 := w.Counters()
	start := time.Now()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		w.Tap(m)
	}
	b.StopTimer()
	for len(w.queue) > 0 {
		time.Sleep(100 * time.Microsecond)
	}
	sent, dropped := w.Counters()
	b.ReportMetric(float64(dropped-dropped0)/float64(b.N), "dropped/op")
	b.ReportMetric(float64(sent-sent0)/time.Since(start).Seconds(), "written-msgs/s")
}
