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
	BatchSize = 64 << 10
	// BatchInterval is the longest an event waits in memory.
	BatchInterval = 100 * time.Millisecond
)

// BatchWriter is an io.Writer that writes in batches. Each Write is kept
// whole and in order. It is safe for concurrent use.
type BatchWriter struct {
	mu     sync.Mutex
	out    io.Writer
	buf    []byte
	spare  []byte
	timer  *time.Timer
	armed  bool
	closed bool
	err    error // the first error writing out, reported by Flush and Close
}

// NewBatchWriter returns a BatchWriter over out.
func NewBatchWriter(out io.Writer) *BatchWriter {
	w := &BatchWriter{out: out, buf: make([]byte, 0, BatchSize), spare: make([]byte, 0, BatchSize)}
	w.timer = time.AfterFunc(time.Hour, func() { w.Flush() })
	w.timer.Stop()
	return w
}

// Write keeps a copy of p for the next batch. After Close it writes
// through.
func (w *BatchWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return w.out.Write(p)
	}
	w.buf = append(w.buf, p...)
	switch {
	case len(w.buf) >= BatchSize:
		w.flushLocked()
	case !w.armed:
		w.armed = true
		w.timer.Reset(BatchInterval)
	}
	return len(p), nil
}

// flushLocked writes the gathered batch. The caller holds w.mu, so
// batches leave in order.
func (w *BatchWriter) flushLocked() {
	if w.armed {
		w.timer.Stop()
		w.armed = false
	}
	if len(w.buf) == 0 {
		return
	}
	batch := w.buf
	w.buf, w.spare = w.spare[:0], batch
	if _, err := w.out.Write(batch); err != nil && w.err == nil {
		w.err = err
	}
	if cap(w.spare) > 4*BatchSize { // one huge event: let it go
		w.spare = make([]byte, 0, BatchSize)
	}
}

// Flush writes what has gathered.
func (w *BatchWriter) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.flushLocked()
	return w.err
}

// Close writes what has gathered; later writes go straight through.
func (w *BatchWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.flushLocked()
	w.closed = true
	return w.err
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
