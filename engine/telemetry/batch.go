package telemetry

import (
	"io"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Batching. At log level info every question writes an "attempt" and a
// "question" event; one write(2) per event costs more than the rest of a
// forwarded question. A BatchWriter gathers events in memory and writes
// them together: when BatchSize bytes have gathered, BatchInterval after
// the first event of a batch, and on Flush or Close, which the server
// calls as it stops (so SIGTERM loses nothing: the drain ends, Close
// writes what is left, then the process exits).

const (
	// BatchSize is the bytes gathered before a batch is written at once.
	// The kernel's share of a batch (into the page cache of a log file)
	// costs less per byte in larger writes: BenchmarkQuestionEvents/batched
	// took 0.87x the CPU per question at 256 KiB as at 64 KiB (10
	// interleaved rounds), and dd 0.85x the system time per byte.
	BatchSize = 256 << 10
	// BatchInterval is the longest an event waits in memory.
	BatchInterval = 100 * time.Millisecond
)

// BatchWriter is an io.Writer that writes in batches. Each Write is kept
// whole and in order. It is safe for concurrent use.
//
// A batch is written outside the lock that events are gathered under, so
// events go on gathering while the kernel takes the previous batch;
// batches still leave one at a time, in the order they were taken.
type BatchWriter struct {
	mu     sync.Mutex // guards buf, spares, armed, closed
	buf    []byte
	spares [][]byte // buffers written out, for the next batches (at most maxSpares)
	timer  *time.Timer
	armed  bool
	closed bool

	outMu sync.Mutex // held while writing to out; taken before mu is released
	out   io.Writer
	err   error // the first error writing out, reported by Flush and Close; guarded by outMu
}

// maxSpares is the buffers kept for the next batches: one is enough while
// the kernel takes a batch faster than events fill the next; a third
// buffer covers a full batch waiting for its turn.
const maxSpares = 2

// NewBatchWriter returns a BatchWriter over out.
func NewBatchWriter(out io.Writer) *BatchWriter {
	w := &BatchWriter{out: out, buf: make([]byte, 0, BatchSize), spares: make([][]byte, 0, maxSpares)}
	w.timer = time.AfterFunc(time.Hour, func() { w.Flush() })
	w.timer.Stop()
	return w
}

var _ zerolog.LevelWriter = (*BatchWriter)(nil)

// WriteLevel is Write: zerolog calls it directly instead of through an
// adapter.
func (w *BatchWriter) WriteLevel(_ zerolog.Level, p []byte) (int, error) { return w.Write(p) }

// Write keeps a copy of p for the next batch. After Close it writes
// through.
func (w *BatchWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	if w.closed {
		w.outMu.Lock() // after the last batch
		w.mu.Unlock()
		defer w.outMu.Unlock()
		return w.out.Write(p)
	}
	w.buf = append(w.buf, p...)
	if len(w.buf) >= BatchSize {
		w.flushUnlock()
		return len(p), nil
	}
	if !w.armed {
		w.armed = true
		w.timer.Reset(BatchInterval)
	}
	w.mu.Unlock()
	return len(p), nil
}

// appendBegin locks the batch for an event of at most room bytes to be
// appended to it in place (the observer's events, encoded straight into
// the batch instead of through a buffer of their own) and returns it; the
// caller hands it back with appendEnd. A batch without that room left
// is written first, so the event does not grow the buffer. After Close
// it returns false and the event goes through Write.
func (w *BatchWriter) appendBegin(room int) ([]byte, bool) {
	w.mu.Lock()
	for !w.closed && len(w.buf) > 0 && cap(w.buf)-len(w.buf) < room {
		w.flushUnlock()
		w.mu.Lock()
	}
	if w.closed {
		w.mu.Unlock()
		return nil, false
	}
	return w.buf, true
}

// appendEnd takes back the batch from appendBegin, the event appended,
// and unlocks it.
func (w *BatchWriter) appendEnd(buf []byte) {
	w.buf = buf
	if len(buf) >= BatchSize {
		w.flushUnlock()
		return
	}
	if !w.armed {
		w.armed = true
		w.timer.Reset(BatchInterval)
	}
	w.mu.Unlock()
}

// flushUnlock writes the gathered batch. The caller holds w.mu; it is
// released once the batch is taken and w.outMu held, so batches leave in
// the order they were taken and the next one gathers meanwhile. It
// returns the first error writing out.
func (w *BatchWriter) flushUnlock() error {
	if w.armed {
		w.timer.Stop()
		w.armed = false
	}
	batch := w.buf
	if len(batch) > 0 {
		if n := len(w.spares); n > 0 {
			w.buf, w.spares = w.spares[n-1], w.spares[:n-1]
		} else { // the first batch, or the batches before are still being written
			w.buf = make([]byte, 0, BatchSize)
		}
	}
	w.outMu.Lock()
	w.mu.Unlock()
	if len(batch) > 0 {
		if _, err := w.out.Write(batch); err != nil && w.err == nil {
			w.err = err
		}
	}
	err := w.err
	w.outMu.Unlock()
	if len(batch) > 0 && cap(batch) <= 4*BatchSize { // else one huge event: let it go
		w.mu.Lock()
		if len(w.spares) < maxSpares {
			w.spares = append(w.spares, batch[:0])
		}
		w.mu.Unlock()
	}
	return err
}

// Flush writes what has gathered.
func (w *BatchWriter) Flush() error {
	w.mu.Lock()
	return w.flushUnlock()
}

// Close writes what has gathered; later writes go straight through.
func (w *BatchWriter) Close() error {
	w.mu.Lock()
	w.closed = true
	return w.flushUnlock()
}

// NewBatchedLogger is NewLogger writing through a BatchWriter over w when
// the output is JSON (a terminal's console format stays line by line). The
// caller must Close the writer when it stops; it is nil when there is
// nothing to close.
func NewBatchedLogger(w io.Writer, format, level string) (zerolog.Logger, *BatchWriter, error) {
	if format == "console" || (format == "auto" && isTerminal(w)) {
		log, err := NewLogger(w, format, level)
		return log, nil, err
	}
	bw := NewBatchWriter(w)
	log, err := NewLogger(bw, "json", level)
	if err != nil {
		return log, nil, err
	}
	return log, bw, nil
}
