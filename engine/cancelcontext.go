package engine

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// CancelContext is a context.Context that ends only when Cancel is called,
// and a CancelWatcher: the engine hands it a transaction's socket to close
// on cancel instead of calling context.AfterFunc. It is the per-question
// context of the front ends (the HTTP/2 stream's, the edge module's
// request's): context.WithCancel costs two allocations and AfterFunc five
// more, a tenth of a question's time in the edge module.
//
// The zero value is ready. It has no deadline and no values; Done's
// channel is made only when asked for (a coalesced follower waits on it, a
// forwarded question does not). A CancelContext kept in a pooled struct is
// reset with its zero value once nothing resolves under it: the copies
// the engine keeps past a question (context.WithoutCancel) only ask it for
// values, which it never has.
type CancelContext struct {
	mu   sync.Mutex
	done chan struct{} // made by Done, closed by Cancel
	err  error         // context.Canceled once cancelled
	// watched are closed by Cancel; in watchBuf while they fit. Each is
	// an io.Closer, kept as any: the engine hands over its Socket, and
	// making an io.Closer of it would look in the runtime's interface
	// tables each time as WebAssembly (a socket's any is its own words).
	watched  []any
	watchBuf [1]any
	// cancelled is err != nil, for Err without the lock: the engine and
	// the front end ask it several times a question.
	cancelled atomic.Bool
}

var _ CancelWatcher = (*CancelContext)(nil)

// closedChan is the Done channel of a context cancelled before anyone
// asked for one.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (c *CancelContext) Deadline() (time.Time, bool) { return time.Time{}, false }

func (c *CancelContext) Done() <-chan struct{} {
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

func (c *CancelContext) Err() error {
	if c.cancelled.Load() {
		return context.Canceled
	}
	return nil
}

func (c *CancelContext) Value(key any) any { return nil }

// Cancel ends the context: Done closes, Err says context.Canceled and
// everything watched is closed (after the lock: a Close may be a system
// call). Cancelling again does nothing.
func (c *CancelContext) Cancel() {
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
	var buf [1]any
	w := append(buf[:0], c.watched...)
	clear(c.watched)
	c.watched = nil
	c.mu.Unlock()
	for _, x := range w {
		x.(io.Closer).Close()
	}
}

// CloseOnCancel closes x when the context is cancelled; at once if it
// is already (CancelWatcher).
func (c *CancelContext) CloseOnCancel(x io.Closer) { c.closeOnCancel(x) }

// closeOnCancel is CloseOnCancel for x, an io.Closer.
func (c *CancelContext) closeOnCancel(x any) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		x.(io.Closer).Close()
		return
	}
	if c.watched == nil {
		c.watched = c.watchBuf[:0]
	}
	c.watched = append(c.watched, x)
	c.mu.Unlock()
}

// StopClosing ends the watch of x. It reports false when x was closed,
// or is being closed, for the cancel (CancelWatcher).
func (c *CancelContext) StopClosing(x io.Closer) bool { return c.stopClosing(x) }

// stopClosing is StopClosing for x, an io.Closer.
func (c *CancelContext) stopClosing(x any) bool {
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
