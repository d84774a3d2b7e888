package dohclient

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/netip"
	"time"

	"golang.org/x/net/http2"

	"github.com/dohfwd/dohfwd/engine"
)

// maxTries is how many connections one exchange may be posted on: the
// first, and others after connections that went away under it.
const maxTries = 3

// exchange posts query on one of the pool's connections and reads the
// reply body into buf. A post the connection dropped unanswered (the
// server closed it, or sent GOAWAY past the stream, or refused the
// stream) goes again on another connection while time is left: the
// question is not lost to a connection's end.
func (p *pool) exchange(ctx context.Context, source netip.Addr, query, buf []byte, deadline time.Time) (int, engine.ConnInfo, error) {
	var info engine.ConnInfo
	for try := 1; ; try++ {
		pc, opener, ready := p.take(source)
		if opener {
			go p.open(pc, deadline)
		}
		if !ready {
			if err := waitOpened(ctx, pc, deadline, opener); err != nil {
				return 0, info, err
			}
		}
		if opener {
			info = engine.ConnInfo{New: true, Resumed: pc.resumed}
		} else if try == 1 {
			p.reused.Add(1)
		}
		n, err := p.post(ctx, pc, query, buf, deadline)
		if err == nil || !retryable(err, pc, ctx, deadline) || try == maxTries {
			return n, info, err
		}
		p.retried.Add(1)
	}
}

// waitOpened waits for pc's dial to end, or ctx's end, and returns its
// error. The attempt that opens pc waits for the dial's own end, which
// its deadline bounds, so that its failure says which step failed; one
// that found pc being opened gives up at its own deadline.
func waitOpened(ctx context.Context, pc *pconn, deadline time.Time, opener bool) error {
	var expired <-chan time.Time
	if !opener {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		expired = t.C
	}
	select {
	case <-pc.opened:
		return pc.err
	case <-ctx.Done():
		return &engine.SocketError{Op: "connect", Class: engine.ErrClosed, Err: ctx.Err()}
	case <-expired:
		return &engine.SocketError{Op: "handshake", Class: engine.ErrTimeout, Err: errHandshakeWait}
	}
}

// post is one POST on pc. Its context is its own (the deadline), ended
// early when the client's ctx is: not a child of ctx, which the engine
// pools (a QuestionContext is reused once its question ends, and a child
// context's watch of a foreign parent is a goroutine that may look at it
// later), but watched the engine's way (engine.CancelWatcherOf) where ctx
// offers it.
func (p *pool) post(ctx context.Context, pc *pconn, query, buf []byte, deadline time.Time) (int, error) {
	rctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if w := engine.CancelWatcherOf(ctx); w != nil {
		c := &cancelCloser{cancel}
		w.CloseOnCancel(c)
		defer w.StopClosing(c)
	} else if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, cancel)
		defer stop()
	}
	// The body is a copy: x/net may still be writing it when the
	// response (an early error status) has come, and the engine reuses
	// its query buffer for its next attempt.
	body := bytes.NewReader(bytes.Clone(query))
	req := (&http.Request{
		Method:        http.MethodPost,
		URL:           p.url,
		Host:          p.host,
		Header:        p.header,
		Body:          io.NopCloser(body),
		ContentLength: int64(len(query)),
		Proto:         "HTTP/2.0",
		ProtoMajor:    2,
	}).WithContext(rctx)
	resp, err := pc.cc.RoundTrip(req)
	if err != nil {
		// RoundTrip sends and waits for the response headers: its
		// failure is the reply's that never came (recv_error).
		return 0, p.failure(ctx, rctx, pc, "receive", err)
	}
	defer resp.Body.Close()
	if err := checkResponse(resp.StatusCode, resp.Header.Get("Content-Type"), resp.ContentLength, len(buf)); err != nil {
		return 0, err
	}
	n, err := readBody(resp.Body, buf)
	if err != nil {
		var se *engine.SocketError
		if errors.As(err, &se) {
			return 0, err
		}
		return 0, p.failure(ctx, rctx, pc, "receive", err)
	}
	return n, nil
}

// cancelCloser is a context's cancel as the io.Closer a CancelWatcher
// closes (a pointer: watchers compare what they watch).
type cancelCloser struct{ cancel context.CancelFunc }

func (c *cancelCloser) Close() error { c.cancel(); return nil }

// failure classifies the error of a post on pc. The attempt's own
// deadline is a timeout (and makes pc prove it is alive, retry.go); the
// client's going away is ErrClosed, which the engine counts as
// cancelled.
func (p *pool) failure(ctx, rctx context.Context, pc *pconn, op string, err error) error {
	switch {
	case ctx.Err() != nil:
		return &engine.SocketError{Op: op, Class: engine.ErrClosed, Err: ctx.Err()}
	case rctx.Err() != nil:
		p.checkAlive(pc)
		return &engine.SocketError{Op: "receive", Class: engine.ErrTimeout, Err: rctx.Err()}
	}
	var se http2.StreamError
	if errors.As(err, &se) {
		return &engine.SocketError{Op: op, Class: engine.ErrReset, Err: err}
	}
	return engine.ClassifyError(op, err, nil)
}

// readBody reads the whole body into buf; one that does not fit is an
// ErrHTTP failure.
func readBody(r io.Reader, buf []byte) (int, error) {
	n := 0
	for {
		dst := buf[n:]
		if len(dst) == 0 {
			var one [1]byte
			dst = one[:]
		}
		m, err := r.Read(dst)
		if m > 0 && n == len(buf) {
			return 0, httpError("reply body over %d bytes", len(buf))
		}
		n += m
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return 0, err
		}
	}
}
