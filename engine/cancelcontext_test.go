package engine

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// closeCounter is an io.Closer that counts its closes.
type closeCounter struct{ n atomic.Int32 }

func (c *closeCounter) Close() error { c.n.Add(1); return nil }

func TestCancelContextCancelAfterWatch(t *testing.T) {
	var c CancelContext
	var a, b closeCounter
	c.CloseOnCancel(&a)
	c.CloseOnCancel(&b) // more than the one kept inline
	if c.Err() != nil || a.n.Load() != 0 {
		t.Fatal("cancelled or closed before cancel")
	}
	c.Cancel()
	if a.n.Load() != 1 || b.n.Load() != 1 {
		t.Fatalf("closes %d and %d after cancel, want 1 each", a.n.Load(), b.n.Load())
	}
	if c.StopClosing(&a) || c.StopClosing(&b) {
		t.Fatal("StopClosing true after the cancel closed the socket")
	}
	c.Cancel() // again: nothing closes twice
	if a.n.Load() != 1 || !errors.Is(c.Err(), context.Canceled) {
		t.Fatalf("closes %d, err %v after a second cancel", a.n.Load(), c.Err())
	}
}

func TestCancelContextCancelBeforeWatch(t *testing.T) {
	var c CancelContext
	c.Cancel()
	var a closeCounter
	c.CloseOnCancel(&a)
	if a.n.Load() != 1 {
		t.Fatalf("closes %d watching a cancelled context, want 1 at once", a.n.Load())
	}
	if c.StopClosing(&a) {
		t.Fatal("StopClosing true for a socket closed at once")
	}
	select {
	case <-c.Done():
	default:
		t.Fatal("Done of a cancelled context is open")
	}
}

func TestCancelContextStopBeforeCancel(t *testing.T) {
	var c CancelContext
	var a, b closeCounter
	c.CloseOnCancel(&a)
	c.CloseOnCancel(&b)
	if !c.StopClosing(&a) {
		t.Fatal("StopClosing false for a socket still watched")
	}
	if c.StopClosing(&a) {
		t.Fatal("StopClosing true for a watch already ended")
	}
	c.Cancel()
	if a.n.Load() != 0 || b.n.Load() != 1 {
		t.Fatalf("closes %d (stopped) and %d (watched) after cancel, want 0 and 1", a.n.Load(), b.n.Load())
	}
}

func TestCancelContextDone(t *testing.T) {
	var c CancelContext
	if _, ok := c.Deadline(); ok || c.Value("x") != nil {
		t.Fatal("a deadline or a value")
	}
	d := c.Done()
	if d == nil || d != c.Done() {
		t.Fatal("Done nil, or a different channel each call")
	}
	ended := make(chan struct{})
	go func() { <-d; close(ended) }()
	select {
	case <-ended:
		t.Fatal("Done closed before cancel")
	case <-time.After(10 * time.Millisecond):
	}
	c.Cancel()
	<-ended
	if !errors.Is(c.Err(), context.Canceled) {
		t.Fatalf("Err %v", c.Err())
	}
}
