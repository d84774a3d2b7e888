//go:build !wasip1

package doh

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dohfwd/dohfwd/engine"
)

// streamContext is the context a stream's question is resolved under: it
// ends when the stream does (RST_STREAM, the connection's end, the
// server's shutdown). It lives in the pooled stream, so a question costs
// no allocation for it (context.WithCancel costs two), and it is an
// engine.CancelWatcher, so the engine closes a transaction's socket on
// cancel without context.AfterFunc (five more).
//
// It has no deadline and no values. Done's channel is made only when
// asked for (a coalesced follower waits on it; a forwarded question does
// not). It is made anew with its stream, when the stream is freed: no
// goroutine resolves under it then, and the copies the engine keeps past
// a question (context.WithoutCancel) only ask it for values, which it
// never has.
type streamContext struct {
	mu       sync.Mutex
	done     chan struct{} // made by Done, closed by cancel
	err      error         // context.Canceled once cancelled
	watched  []io.Closer   // closed by cancel; in watchBuf while it fits
	watchBuf [1]io.Closer
	// cancelled is err != nil, for Err without the lock: the engine and
	// the core ask it several times a question.
	cancelled atomic.Bool
}

var _ engine.CancelWatcher = (*streamContext)(nil)

// closedChan is the Done channel of a context cancelled before anyone
// asked for one.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (c *streamContext) Deadline() (time.Time, bool) { return time.Time{}, false }

func (c *streamContext) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		if c.err != nil {
			return closedChan
		}
		c.done = make(chan struct{})
	}
	return c.done
}

func (c *streamContext) Err() error {
	if c.cancelled.Load() {
		return context.Canceled
	}
	return nil
}

func (c *streamContext) Value(key any) any { return nil }

// cancel ends the context: Done closes, Err says context.Canceled and
// everything watched is closed (after the lock: a Close may be a system
// call). Cancelling again does nothing.
func (c *streamContext) cancel() {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = context.Canceled
	c.cancelled.Store(true)
	if c.done != nil {
		close(c.done)
	}
	var buf [1]io.Closer
	w := append(buf[:0], c.watched...)
	clear(c.watched)
	c.watched = nil
	c.mu.Unlock()
	for _, x := range w {
		x.Close()
	}
}

// CloseOnCancel closes x when the context is cancelled; at once if it
// is already (engine.CancelWatcher).
func (c *streamContext) CloseOnCancel(x io.Closer) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		x.Close()
		return
	}
	if c.watched == nil {
		c.watched = c.watchBuf[:0]
	}
	c.watched = append(c.watched, x)
	c.mu.Unlock()
}

// StopClosing ends the watch of x. It reports false when x was closed,
// or is being closed, for the cancel (engine.CancelWatcher).
func (c *streamContext) StopClosing(x io.Closer) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, y := range c.watched {
		if y == x {
			last := len(c.watched) - 1
			c.watched[i] = c.watched[last]
			c.watched[last] = nil
			c.watched = c.watched[:last]
			return true
		}
	}
	return false
}
