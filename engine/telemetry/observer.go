package telemetry

import (
	"encoding/binary"
	"net/netip"
	"strconv"

	"github.com/rs/zerolog"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/dnswire"
)

// AttemptMetrics counts attempts for metrics; package metrics implements
// it. Logs do not depend on it, so the edge module logs without it.
type AttemptMetrics interface {
	ObserveAttempt(engine.AttemptEvent)
}

// Observer turns the engine's events into log events and metrics. It
// implements engine.Observer without allocating per event. Its "attempt"
// and "question" events copy most of their fields pre-rendered (see
// renderCache) and carry the engine's time of the attempt's or question's
// end, so they cost no clock reading of their own.
type Observer struct {
	log       zerolog.Logger
	batch     *BatchWriter   // log's writer, written to directly; may be nil
	metrics   AttemptMetrics // may be nil
	attempts  *renderCache[attemptFields]
	questions *renderCache[questionFields]
}

// NewObserver returns an Observer logging to log and, when m is not nil,
// counting into m.
func NewObserver(log zerolog.Logger, m AttemptMetrics) *Observer {
	return &Observer{log: log, metrics: m,
		attempts: newRenderCache[attemptFields](log), questions: newRenderCache[questionFields](log)}
}

// NewBatchedObserver is NewObserver for a log that writes to batch, as
// NewBatchedLogger's does. Its "attempt" and "question" events are
// encoded straight into batch's buffer: the bytes log would write, without
// the copies through a zerolog event (its context into the event, the
// event into the batch). An event whose name needs JSON escaping, one
// listing served traces, and events after batch is closed go through log.
// batch nil: NewObserver.
func NewBatchedObserver(log zerolog.Logger, batch *BatchWriter, m AttemptMetrics) *Observer {
	o := NewObserver(log, m)
	o.batch = batch
	return o
}

var (
	_ engine.Observer      = (*Observer)(nil)
	_ engine.ProbeObserver = (*Observer)(nil)
	_ engine.CaseObserver  = (*Observer)(nil)
)

// Attempt writes the "attempt" event: one per upstream attempt, whatever
// its outcome.
func (o *Observer) Attempt(ev engine.AttemptEvent) {
	if o.metrics != nil {
		o.metrics.ObserveAttempt(ev)
	}
	if !o.infoEnabled() {
		return
	}
	f := o.attempts.get(attemptFields{scope: ev.Scope, proto: ev.Proto, server: ev.Server, transport: ev.Transport, conn: ev.Conn,
		qtype: ev.QType, attempt: ev.Attempt, outcome: ev.Outcome, class: ev.Class, rcode: ev.Rcode, demoted: ev.Demoted})
	if dst, ok := o.batchBegin(f.prefix, ev.QName); ok {
		dst = appendQuestion(append(dst, f.prefix...), ev.Question, ev.QName)
		dst = appendMillisValue(append(dst, `,"rtt_ms":`...), ev.RTT)
		dst = appendTimeField(appendTrace(dst, ev.Trace), ev.End)
		o.batch.appendEnd(append(dst, '}', '\n'))
		return
	}
	var b [runSize]byte
	e, key, r := startRun(f.log.Log(), b[:0], ev.Question, ev.QName, "rtt_ms", ev.RTT)
	r = appendTime(appendKey(appendTrace(r, ev.Trace), zerolog.TimestampFieldName), ev.End)
	e.RawJSON(key, r).Send()
}

// Question writes the "question" event at the end of each question.
func (o *Observer) Question(ev engine.QuestionEvent) {
	if !o.infoEnabled() {
		return
	}
	f := o.questions.get(questionFields{scope: ev.Scope, proto: ev.Proto, qtype: ev.QType, result: ev.Result,
		reason: ev.Reason, attempts: ev.Attempts, cacheHit: ev.CacheHit})
	if len(ev.Served) == 0 {
		if dst, ok := o.batchBegin(f.prefix, ev.QName); ok {
			dst = appendQuestion(append(dst, f.prefix...), ev.Question, ev.QName)
			dst = appendTrace(appendMillisValue(append(dst, `,"duration_ms":`...), ev.Duration), ev.Trace)
			if ev.Joined != nil {
				dst = appendHex(appendKey(dst, "joined_trace_id"), ev.Joined.ID[:])
			}
			dst = appendTimeField(dst, ev.End)
			o.batch.appendEnd(append(dst, '}', '\n'))
			return
		}
	}
	var b [runSize]byte
	e, key, r := startRun(f.log.Log(), b[:0], ev.Question, ev.QName, "duration_ms", ev.Duration)
	r = appendTrace(r, ev.Trace)
	if ev.Joined != nil {
		r = appendHex(appendKey(r, "joined_trace_id"), ev.Joined.ID[:])
	}
	if len(ev.Served) > 0 { // a list zerolog writes; the time follows in a run of its own
		e = e.RawJSON(key, r).Array("trace_ids", servedTraces{own: ev.Trace, served: ev.Served})
		e.RawJSON(zerolog.TimestampFieldName, appendTime(b[:0], ev.End)).Send()
		return
	}
	r = appendTime(appendKey(r, zerolog.TimestampFieldName), ev.End)
	e.RawJSON(key, r).Send()
}

// batchBegin opens the batch for an event written from prefix, when the
// event can be written straight into it: the observer has a batch, the
// prefix was read and the name needs no escaping. The caller appends the
// event and hands the batch back with appendEnd.
func (o *Observer) batchBegin(prefix []byte, qname string) ([]byte, bool) {
	if o.batch == nil || prefix == nil || !plainJSON(qname) {
		return nil, false
	}
	// The prefix, the run's longest fields, the closing brace and newline.
	return o.batch.appendBegin(len(prefix) + len(`,"question":`) + runSize + 2)
}

// infoEnabled reports whether events at level info are written, the check
// zerolog makes for log.Info(): the observer's loggers write their level
// from their context and log at NoLevel.
func (o *Observer) infoEnabled() bool {
	return zerolog.GlobalLevel() <= zerolog.InfoLevel && o.log.GetLevel() <= zerolog.InfoLevel
}

// attemptFields are the fields of an "attempt" event rendered once per
// combination.
type attemptFields struct {
	scope     string
	proto     string
	server    netip.AddrPort
	transport engine.Transport
	conn      engine.Conn // an encrypted attempt's connection: new, resumed, reused
	qtype     uint16
	attempt   int
	outcome   engine.Outcome
	class     engine.ErrorClass // a socket failure's class (tls, http, refused, ...)
	rcode     int
	demoted   bool
}

func (f attemptFields) hash() uint64 {
	a := f.server.Addr().As16()
	var d uint64
	if f.demoted {
		d = 1
	}
	// Independent products (odd constants), then one mix: the multiplies
	// run side by side instead of one after another.
	return mix(hashString(f.scope)^hashString(f.proto)*0x9fb21c651e98df25,
		binary.LittleEndian.Uint64(a[:8])*0x9e3779b97f4a7c15^
			binary.LittleEndian.Uint64(a[8:])*0xc2b2ae3d27d4eb4f^
			(uint64(f.server.Port())|uint64(f.qtype)<<16|uint64(f.transport)<<32|uint64(f.outcome)<<40|uint64(f.conn)<<48|uint64(f.class)<<56)*0x165667b19e3779f9^
			(uint64(f.attempt)<<1|uint64(f.rcode)<<8|d)*0x27d4eb2f165667c5)
}

func (f attemptFields) render(c zerolog.Context) zerolog.Context {
	var server [64]byte
	c = levelAndMessage(c, "attempt").
		Str("scope", f.scope).
		Bytes("server", f.server.AppendTo(server[:0])).
		Str("transport", f.transport.String())
	if f.conn != engine.ConnNone {
		c = c.Str("conn", f.conn.String())
	}
	if f.proto != "" {
		c = c.Str("proto", f.proto)
	}
	c = typeField(c, f.qtype).
		Int("attempt", f.attempt).
		Str("outcome", f.outcome.String())
	if f.class != 0 {
		c = c.Str("class", f.class.String())
	}
	return rcodeField(c, f.rcode).Bool("demoted", f.demoted)
}

// questionFields are the fields of a "question" event rendered once per
// combination.
type questionFields struct {
	scope    string
	proto    string
	qtype    uint16
	result   engine.Result
	reason   engine.Reason
	attempts int
	cacheHit bool
}

func (f questionFields) hash() uint64 {
	var hit uint64
	if f.cacheHit {
		hit = 1
	}
	return mix(hashString(f.scope)^hashString(f.proto)*0x9fb21c651e98df25,
		uint64(f.qtype)|uint64(f.result)<<16|uint64(f.reason)<<24|hit<<32|uint64(f.attempts)<<33)
}

func (f questionFields) render(c zerolog.Context) zerolog.Context {
	c = levelAndMessage(c, "question").Str("scope", f.scope)
	if f.proto != "" {
		c = c.Str("proto", f.proto)
	}
	c = typeField(c, f.qtype).Str("result", f.result.String())
	if f.reason != engine.ReasonNone {
		c = c.Str("reason", f.reason.String())
	}
	return c.Int("attempts", f.attempts).Bool("cache_hit", f.cacheHit)
}

// levelAndMessage writes what zerolog writes for log.Info().Msg(msg): the
// level and the message (here first, as the context comes first).
func levelAndMessage(c zerolog.Context, msg string) zerolog.Context {
	return c.Str(zerolog.LevelFieldName, zerolog.LevelFieldMarshalFunc(zerolog.InfoLevel)).
		Str(zerolog.MessageFieldName, msg)
}

// appendMillis appends us microseconds (0 ≤ us) as milliseconds.
func appendMillis(dst []byte, us int64) []byte {
	dst = strconv.AppendInt(dst, us/1000, 10)
	frac := us % 1000
	if frac == 0 {
		return dst
	}
	dst = append(dst, '.', byte('0'+frac/100), byte('0'+frac/10%10), byte('0'+frac%10))
	for dst[len(dst)-1] == '0' {
		dst = dst[:len(dst)-1]
	}
	return dst
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

// CaseNotKept writes the "case not kept" warning, once per server: its
// replies did not keep the question name's random case (0x20), so it is
// asked in lower case and loses that defence against forged replies.
func (o *Observer) CaseNotKept(server string) {
	if e := o.log.Warn(); e != nil {
		e.Str("server", server).Msg("upstream does not keep the question's case: asked in lower case from now on (0x20 off for it)")
	}
}

// typeField writes qtype as its mnemonic, or its number when it has none.
func typeField(c zerolog.Context, t uint16) zerolog.Context {
	if s, ok := dnswire.TypeName(t); ok {
		return c.Str("qtype", s)
	}
	return c.Uint16("qtype", t)
}

// rcodeField writes the reply's rcode mnemonic, or "" when no reply was
// used (timeouts, errors, cancellations).
func rcodeField(c zerolog.Context, rc int) zerolog.Context {
	if rc < 0 {
		return c.Str("rcode", "")
	}
	if s, ok := dnswire.RcodeName(rc); ok {
		return c.Str("rcode", s)
	}
	return c.Int("rcode", rc)
}
