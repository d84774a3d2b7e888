package telemetry_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rs/zerolog"

	"github.com/dohfwd/dohfwd/engine"

	"github.com/dohfwd/dohfwd/engine/telemetry"
)

// countingWriter records what reaches the output and how many writes.
type countingWriter struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	writes int
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes++
	return c.buf.Write(p)
}

func (c *countingWriter) snapshot() (string, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String(), c.writes
}

// Events gather in memory and leave together: none one write each, all of
// them within telemetry.BatchInterval.
func TestBatchWriterWritesInBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		out := &countingWriter{}
		bw := telemetry.NewBatchWriter(out)
		o := telemetry.NewObserver(zerolog.New(bw), nil)
		for range 100 {
			o.Attempt(sampleAttempt)
		}
		if s, n := out.snapshot(); n != 0 || s != "" {
			t.Fatalf("%d writes before the interval, want 0", n)
		}
		time.Sleep(telemetry.BatchInterval)
		synctest.Wait()
		s, n := out.snapshot()
		if n != 1 {
			t.Errorf("%d writes for 100 events, want 1 batch", n)
		}
		if lines := bytes.Count([]byte(s), []byte("\n")); lines != 100 {
			t.Errorf("%d events out after the interval, want 100", lines)
		}
		bw.Close()
	})
}

// A full batch leaves at once, without waiting for the interval.
func TestBatchWriterFlushesFullBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		out := &countingWriter{}
		bw := telemetry.NewBatchWriter(out)
		line := append(bytes.Repeat([]byte("x"), 1023), '\n')
		for range telemetry.BatchSize / len(line) {
			bw.Write(line)
		}
		if _, n := out.snapshot(); n != 1 {
			t.Errorf("%d writes after a full batch, want 1", n)
		}
		bw.Close()
	})
}

// Close (what the server does as it stops on SIGTERM) writes every event
// still in memory, whole and in order, from many goroutines at once; later
// events go straight through.
func TestBatchWriterCloseLosesNothing(t *testing.T) {
	t.Run("logger", func(t *testing.T) { testBatchWriterCloseLosesNothing(t, false) })
	t.Run("batched", func(t *testing.T) { testBatchWriterCloseLosesNothing(t, true) })
}

// testBatchWriterCloseLosesNothing: batched, the observer writes its
// events straight into the batch (NewBatchedObserver).
func testBatchWriterCloseLosesNothing(t *testing.T, batched bool) {
	out := &countingWriter{}
	bw := telemetry.NewBatchWriter(out)
	log := zerolog.New(bw)
	o := telemetry.NewObserver(log, nil)
	if batched {
		o = telemetry.NewBatchedObserver(log, bw, nil)
	}
	var wg sync.WaitGroup
	const writers, each = 8, 500
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				ev := sampleAttempt
				ev.Question, ev.Attempt = uint64(w), i
				o.Attempt(ev)
			}
		})
	}
	wg.Wait()
	if err := bw.Close(); err != nil {
		t.Fatal(err)
	}
	o.Question(engine.QuestionEvent{Question: 99, QName: "after.close."})
	s, _ := out.snapshot()
	next := map[uint64]int{}
	sc := bufio.NewScanner(bytes.NewReader([]byte(s)))
	n := 0
	for sc.Scan() {
		var ev struct {
			Message  string `json:"message"`
			Question uint64 `json:"question"`
			Attempt  int    `json:"attempt"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("event %d is not whole JSON: %q", n, sc.Text())
		}
		n++
		if ev.Message == "question" {
			continue
		}
		if ev.Attempt != next[ev.Question] {
			t.Fatalf("writer %d: event %d out of order (want %d)", ev.Question, ev.Attempt, next[ev.Question])
		}
		next[ev.Question]++
	}
	if n != writers*each+1 {
		t.Errorf("%d events out, want %d", n, writers*each+1)
	}
}

// A batched logger at info costs no allocation per event either.
func TestBatchedLoggerDoesNotAllocate(t *testing.T) {
	log, bw, err := telemetry.NewBatchedLogger(io.Discard, "json", "info")
	if err != nil || bw == nil {
		t.Fatalf("NewBatchedLogger: %v %v", bw, err)
	}
	defer bw.Close()
	qe := engine.QuestionEvent{Question: 1, QName: "a.example.", QType: 1, Result: engine.ResultAnswer,
		Trace: &engine.Trace{HasParent: true}, Joined: &engine.Trace{}}
	// One event per run: under the race detector sync.Pool drops a
	// quarter of what is put back, so zerolog's pooled events (the
	// fallback path) allocate now and then, less than once a run.
	for _, o := range []*telemetry.Observer{telemetry.NewObserver(log, nil), telemetry.NewBatchedObserver(log, bw, nil)} {
		o.Attempt(sampleAttempt)
		o.Question(qe)
		// 2 000 events each: batches fill and leave, their buffers reused.
		if n := testing.AllocsPerRun(2000, func() { o.Attempt(sampleAttempt) }); n != 0 {
			t.Fatalf("attempt events through the batch writer allocate %v times per event", n)
		}
		if n := testing.AllocsPerRun(2000, func() { o.Question(qe) }); n != 0 {
			t.Fatalf("question events through the batch writer allocate %v times per event", n)
		}
	}
}

// slowWriter takes its time over each write and fails the test if two
// writes overlap.
type slowWriter struct {
	countingWriter
	busy atomic.Bool
	t    *testing.T
}

func (s *slowWriter) Write(p []byte) (int, error) {
	if s.busy.Swap(true) {
		s.t.Error("two batches written at once")
	}
	defer s.busy.Store(false)
	time.Sleep(200 * time.Microsecond)
	return s.countingWriter.Write(p)
}

// While a batch is being written (outside the lock events gather under),
// events from many goroutines keep gathering and flushes keep coming
// (full batches, Flush as the timer calls it): batches still leave one at
// a time and in order, every line whole, none lost, and Close leaves
// nothing behind.
func TestBatchWriterWritesBatchesInOrderWhileGathering(t *testing.T) {
	out := &slowWriter{t: t}
	bw := telemetry.NewBatchWriter(out)
	const writers, each = 6, 2000
	line := func(w, i int) []byte {
		return fmt.Appendf(nil, `{"w":%d,"i":%d,"pad":"%s"}`+"\n", w, i, bytes.Repeat([]byte("x"), (w*131+i)%700))
	}
	stop := make(chan struct{})
	var flusher sync.WaitGroup
	flusher.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				bw.Flush()
				time.Sleep(50 * time.Microsecond)
			}
		}
	})
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				bw.Write(line(w, i))
			}
		})
	}
	wg.Wait()
	close(stop)
	flusher.Wait()
	if err := bw.Close(); err != nil {
		t.Fatal(err)
	}
	s, writes := out.snapshot()
	next := make([]int, writers)
	n := 0
	for l := range strings.Lines(s) {
		var ev struct{ W, I int }
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("line %d is not whole: %q", n, l)
		}
		if want := string(line(ev.W, ev.I)); l != want {
			t.Fatalf("line %d: %q, want %q", n, l, want)
		}
		if ev.I != next[ev.W] {
			t.Fatalf("writer %d: line %d out of order (want %d)", ev.W, ev.I, next[ev.W])
		}
		next[ev.W]++
		n++
	}
	if n != writers*each {
		t.Errorf("%d lines out, want %d", n, writers*each)
	}
	t.Logf("%d lines in %d writes", n, writes)
}
