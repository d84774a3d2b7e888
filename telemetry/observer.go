package telemetry

import (
	"github.com/rs/zerolog"

	"github.com/dohfwd/dohfwd/dnswire"
	"github.com/dohfwd/dohfwd/engine"
)

// AttemptMetrics counts attempts for metrics; package metrics implements
// it. Logs do not depend on it, so the edge module logs without it.
type AttemptMetrics interface {
	ObserveAttempt(engine.AttemptEvent)
}

// Observer turns the engine's events into log events and metrics. It
// implements engine.Observer without allocating per event.
type Observer struct {
	log     zerolog.Logger
	metrics AttemptMetrics // may be nil
}

// NewObserver returns an Observer logging to log and, when m is not nil,
// counting into m.
func NewObserver(log zerolog.Logger, m AttemptMetrics) *Observer {
	return &Observer{log: log, metrics: m}
}

var (
	_ engine.Observer      = (*Observer)(nil)
	_ engine.ProbeObserver = (*Observer)(nil)
)

// Attempt writes the "attempt" event: one per upstream attempt, whatever
// its outcome.
func (o *Observer) Attempt(ev engine.AttemptEvent) {
	if o.metrics != nil {
		o.metrics.ObserveAttempt(ev)
	}
	e := o.log.Info()
	if e == nil {
		return
	}
	var server [64]byte
	e = e.Uint64("question", ev.Question).
		Str("qname", ev.QName)
	e = typeField(e, ev.QType).
		Str("scope", ev.Scope).
		Int("attempt", ev.Attempt).
		Bytes("server", ev.Server.AppendTo(server[:0])).
		Str("transport", ev.Transport.String()).
		Str("outcome", ev.Outcome.String())
	e = rcodeField(e, ev.Rcode).
		Float64("rtt_ms", float64(ev.RTT.Microseconds())/1000).
		Bool("demoted", ev.Demoted)
	traceFields(e, ev.Trace).Msg("attempt")
}

// Question writes the "question" event at the end of each question.
func (o *Observer) Question(ev engine.QuestionEvent) {
	e := o.log.Info()
	if e == nil {
		return
	}
	e = e.Uint64("question", ev.Question).Str("qname", ev.QName)
	e = typeField(e, ev.QType).
		Str("scope", ev.Scope).
		Str("result", ev.Result.String())
	if ev.Reason != engine.ReasonNone {
		e = e.Str("reason", ev.Reason.String())
	}
	e = e.Int("attempts", ev.Attempts).
		Bool("cache_hit", ev.CacheHit).
		Float64("duration_ms", float64(ev.Duration.Microseconds())/1000)
	e = traceFields(e, ev.Trace)
	if ev.Joined != nil {
		e = e.Hex("joined_trace_id", ev.Joined.ID[:])
	}
	if len(ev.Served) > 0 {
		e = e.Array("trace_ids", servedTraces{own: ev.Trace, served: ev.Served})
	}
	e.Msg("question")
}

// traceFields writes a question's trace: trace_id, span_id (this server's
// span) and parent_id (the caller's span, when it sent one).
func traceFields(e *zerolog.Event, t *engine.Trace) *zerolog.Event {
	if t == nil {
		return e
	}
	e = e.Hex("trace_id", t.ID[:]).Hex("span_id", t.Span[:])
	if t.HasParent {
		e = e.Hex("parent_id", t.Parent[:])
	}
	return e
}

// servedTraces lists the traces one upstream question served: its own
// first, then those of the identical questions that waited for it.
type servedTraces struct {
	own    *engine.Trace
	served []*engine.Trace
}

func (s servedTraces) MarshalZerologArray(a *zerolog.Array) {
	if s.own != nil {
		a.Hex(s.own.ID[:])
	}
	for _, t := range s.served {
		a.Hex(t.ID[:])
	}
}

// Probe writes the "probe" event: one per background probe of a demoted
// server (engine.probe: true).
func (o *Observer) Probe(ev engine.ProbeEvent) {
	e := o.log.Info()
	if e == nil {
		return
	}
	e.Str("server", ev.Server).
		Str("transport", ev.Transport.String()).
		Str("outcome", ev.Outcome.String()).
		Float64("rtt_ms", float64(ev.RTT.Microseconds())/1000).
		Bool("cleared", ev.Cleared).
		Msg("probe")
}

// typeField writes qtype as its mnemonic, or its number when it has none.
func typeField(e *zerolog.Event, t uint16) *zerolog.Event {
	if s, ok := dnswire.TypeName(t); ok {
		return e.Str("qtype", s)
	}
	return e.Uint16("qtype", t)
}

// rcodeField writes the reply's rcode mnemonic, or "" when no reply was
// used (timeouts, errors, cancellations).
func rcodeField(e *zerolog.Event, rc int) *zerolog.Event {
	if rc < 0 {
		return e.Str("rcode", "")
	}
	if s, ok := dnswire.RcodeName(rc); ok {
		return e.Str("rcode", s)
	}
	return e.Int("rcode", rc)
}
