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

// QuestionContext is a question's context as a front end makes it: its
// parent (the client's cancellation), the client it names (for the
// client's share of upstream transactions, ClientLimiter) and the trace
// it carries (for the question's events). A context type of its own, so
// the engine finds both without a walk up the chain and sees through it
// to a CancelWatcher.
//
// WithClient, WithTrace and WithClientTrace allocate one. A front end
// that keeps one with each request (in a pooled struct) fills it in place
// with Set and allocates nothing: as WebAssembly an allocation per
// question costs more than the rest of the context's work. It may be set
// again once the question asked under it has returned: what the engine
// keeps past that (a detached question's context, the traces of a shared
// upstream question) it copies.
type QuestionContext struct {
	context.Context
	client    netip.Addr
	trace     Trace
	hasClient bool
	hasTrace  bool
	proto     string // the client's protocol (SetProto), "" when not said
}

type traceKey struct{}

// Set makes c parent naming client, when valid, and carrying trace, when
// not nil (its value: trace may change afterwards), and returns c.
func (c *QuestionContext) Set(parent context.Context, client netip.Addr, trace *Trace) context.Context {
	c.Context, c.client, c.hasClient, c.hasTrace = parent, client, client.IsValid(), trace != nil
	c.proto = ""
	if trace != nil {
		c.trace = *trace
	}
	return c
}

func (c *QuestionContext) Value(key any) any {
	switch key {
	case traceKey{}:
		if c.hasTrace {
			return &c.trace
		}
	case clientKey{}:
		if c.hasClient {
			return c.client
		}
	}
	return c.Context.Value(key)
}

// WithTrace returns ctx carrying t to the question ResolveWire answers.
func WithTrace(ctx context.Context, t Trace) context.Context {
	return &QuestionContext{Context: ctx, trace: t, hasTrace: true}
}

// WithClientTrace is WithTrace(WithClient(ctx, client), t) in one
// allocation.
func WithClientTrace(ctx context.Context, client netip.Addr, t Trace) context.Context {
	return &QuestionContext{Context: ctx, client: client, hasClient: true, trace: t, hasTrace: true}
}

// detachedContext is the context of a question's detached copy
// (question.detached), which may outlive the question: without its
// cancellation and deadline, with its client and trace copied out of
// the front end's QuestionContext (which may be set again once the
// question returns), and trace the copy's own trace when it was ctx's.
func detachedContext(ctx context.Context, trace *Trace) (context.Context, *Trace) {
	c, ok := ctx.(*QuestionContext)
	if !ok {
		return context.WithoutCancel(ctx), trace
	}
	d := &QuestionContext{Context: context.WithoutCancel(c.Context), client: c.client, hasClient: c.hasClient,
		trace: c.trace, hasTrace: c.hasTrace, proto: c.proto}
	if trace == &c.trace {
		trace = &d.trace
	}
	return d, trace
}

// SetProto names the protocol the question came by (h2, h3, doq, ...):
// its attempt and question events carry it as proto. Call it after Set,
// which forgets it.
func (c *QuestionContext) SetProto(proto string) { c.proto = proto }

// ProtoFrom returns the client protocol ctx names (SetProto), or "".
func ProtoFrom(ctx context.Context) string {
	if c, ok := ctx.(*QuestionContext); ok {
		return c.proto
	}
	return ""
}

// TraceFrom returns the trace ctx carries, or nil.
func TraceFrom(ctx context.Context) *Trace {
	if c, ok := ctx.(*QuestionContext); ok && c.hasTrace {
		return &c.trace
	}
	t, _ := ctx.Value(traceKey{}).(*Trace)
	return t
}
