//go:build wasip1

package main

import (
	"context"
	"io"
	"sync"
	"time"

	"github.com/dohfwd/dohfwd/engine"
)

// requestContext is the context a request's question is resolved under:
// it ends when the host reports the client gone (EventCancel) or the
// request is answered. It is an engine.CancelWatcher, as the native
// HTTP/2 server's stream context is (package doh, streamContext), so the
// engine closes a transaction's socket on cancel without
// context.AfterFunc; with context.WithCancel and AfterFunc, the contexts
// were about a tenth of the module's time for a TCP question (a V8
// profile of the Workers glue under Node). One allocation a request.
//
// It has no deadline and no values; Done's channel is made only when
// asked for (a coalesced follower, a TCP connect watched for the cancel).
type requestContext struct {
	mu       sync.Mutex
	done     chan struct{} // made by Done, closed by cancel
	err      error         // context.Canceled once cancelled
	watched  []io.Closer   // closed by cancel; in watchBuf while it fits
	watchBuf [1]io.Closer
}

var _ engine.CancelWatcher = (*requestContext)(nil)

// closedChan is the Done channel of a context cancelled before anyone
// asked for one.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (c *requestContext) Deadline() (time.Time, bool) { return time.Time{}, false }

func (c *requestContext) Done() <-chan struct{} {
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

func (c *requestContext) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *requestContext) Value(key any) any { return nil }

// cancel ends the context: Done closes, Err says context.Canceled and
// everything watched is closed. Cancelling again does nothing.
func (c *requestContext) cancel() {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = context.Canceled
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

// CloseOnCancel closes x when the context is cancelled; at once if it is
// already (engine.CancelWatcher).
func (c *requestContext) CloseOnCancel(x io.Closer) {
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
func (c *requestContext) StopClosing(x io.Closer) bool {
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
