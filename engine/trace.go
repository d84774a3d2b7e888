package engine

import (
	"context"
	"net/netip"
)

// Trace is a question's place in a distributed trace (W3C Trace Context):
// the trace it belongs to, the caller's span (Parent, when the caller sent
// one) and the span of this server's work on it. The front end reads and
// makes it; the engine only carries it to the question's events.
type Trace struct {
	ID        [16]byte
	Parent    [8]byte
	Span      [8]byte
	Flags     byte
	HasParent bool // Parent came from the caller; false: the ID was made here
}

// traceContext carries a Trace: a context type of its own, so attaching a
// trace costs one small allocation and finding it no walk up the chain.
type traceContext struct {
	context.Context
	t Trace
}

type traceKey struct{}

func (c *traceContext) Value(key any) any {
	if key == (traceKey{}) {
		return &c.t
	}
	return c.Context.Value(key)
}

// WithTrace returns ctx carrying t to the question ResolveWire answers.
func WithTrace(ctx context.Context, t Trace) context.Context { return &traceContext{ctx, t} }

// WithClientTrace is WithTrace(WithClient(ctx, client), t) in one
// allocation.
func WithClientTrace(ctx context.Context, client netip.Addr, t Trace) context.Context {
	return &clientTraceContext{ctx, client, t}
}

// clientTraceContext carries a client and a trace (WithClientTrace).
type clientTraceContext struct {
	context.Context
	client netip.Addr
	t      Trace
}

func (c *clientTraceContext) Value(key any) any {
	switch key {
	case traceKey{}:
		return &c.t
	case clientKey{}:
		return c.client
	}
	return c.Context.Value(key)
}

// TraceFrom returns the trace ctx carries, or nil.
func TraceFrom(ctx context.Context) *Trace {
	switch c := ctx.(type) {
	case *traceContext:
		return &c.t
	case *clientTraceContext:
		return &c.t
	}
	t, _ := ctx.Value(traceKey{}).(*Trace)
	return t
}
