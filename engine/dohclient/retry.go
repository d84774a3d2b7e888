package dohclient

import (
	"context"
	"errors"
	"time"

	"golang.org/x/net/http2"

	"github.com/dohfwd/dohfwd/engine"
)

// pingWait is how long a connection suspected dead has to answer a PING.
const pingWait = time.Second

// retryable is the rule for posting a failed exchange again on another
// connection: the attempt still has time and its client is there, the
// failure was the connection's (not the deadline, not an HTTP refusal),
// and that connection takes no new streams any more (the server closed it
// or sent GOAWAY) or refused the stream. A DNS query is idempotent, so a
// post the server may have seen can go again.
func retryable(err error, pc *pconn, ctx context.Context, deadline time.Time) bool {
	if ctx.Err() != nil || !time.Now().Before(deadline) {
		return false
	}
	var se *engine.SocketError
	if errors.As(err, &se) {
		switch se.Class {
		case engine.ErrTimeout, classHTTP, engine.ErrLocal:
			return false
		}
	}
	var stream http2.StreamError
	if errors.As(err, &stream) && stream.Code == http2.ErrCodeRefusedStream {
		return true
	}
	return !pc.cc.CanTakeNewRequest()
}

// checkAlive makes pc answer a PING after one of its streams timed out:
// a connection whose server is gone (no FIN, no RST) is closed at once,
// so later questions open a new one instead of timing out on it in turn
// (a pooled connection dead and unnoticed until each question's deadline
// is dnsproxy#527's bug). One PING at a time per connection.
func (p *pool) checkAlive(pc *pconn) {
	if !pc.pinging.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer pc.pinging.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), pingWait)
		defer cancel()
		if err := pc.cc.Ping(ctx); err != nil {
			pc.cc.Close()
		}
	}()
}
