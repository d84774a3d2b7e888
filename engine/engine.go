package engine

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

// Engine answers questions by forwarding them upstream under the resolvd
// rules. It is safe for concurrent use; each question runs on its caller's
// goroutine.
type Engine struct {
	network  Network
	observer Observer
	first    Transport // UDP, or TCP under Options.TCPOnly
	epoch    time.Time // the marks' clock starts here (monotonic)

	routes   atomic.Pointer[routes]
	inFlight inFlight
	counters counters

	questionIDs atomic.Uint64

	mu        sync.Mutex // guards upstreams and prober during Reconfigure
	upstreams map[netip.AddrPort]*upstream
	prober    *prober // running while Config.Probe is on
}

// Options are the parts an engine is built from.
type Options struct {
	// Network opens the engine's sockets. Required.
	Network Network
	// Observer receives attempt and question events; nil drops them.
	Observer Observer
	// TCPOnly makes TCP the first transport of every attempt, for hosts
	// without UDP (Cloudflare Workers); the attempt, timeout and demotion
	// rules are unchanged.
	TCPOnly bool
}

// New returns an engine for cfg.
func New(cfg Config, opts Options) (*Engine, error) {
	if opts.Network == nil {
		return nil, errors.New("engine: no Network")
	}
	e := &Engine{
		network:   opts.Network,
		observer:  opts.Observer,
		epoch:     time.Now(),
		upstreams: map[netip.AddrPort]*upstream{},
	}
	if e.observer == nil {
		e.observer = nopObserver{}
	}
	if opts.TCPOnly {
		e.first = TCP
	}
	if err := e.Reconfigure(cfg); err != nil {
		return nil, err
	}
	return e, nil
}

// Reconfigure takes a new configuration atomically. Questions in flight
// finish on the configuration they started with; the marks of addresses
// still configured survive. On error nothing changes.
func (e *Engine) Reconfigure(cfg Config) error {
	cfg = cfg.withDefaults()
	e.mu.Lock()
	defer e.mu.Unlock()
	next := map[netip.AddrPort]*upstream{}
	known := func(ap netip.AddrPort) *upstream {
		if u := next[ap]; u != nil {
			return u
		}
		u := e.upstreams[ap]
		if u == nil {
			u = newUpstream(ap)
		}
		next[ap] = u
		return u
	}
	r, err := buildRoutes(cfg, known)
	if err != nil {
		return err
	}
	r.takeCache(e.routes.Load())
	e.upstreams = next
	e.inFlight.ceiling.Store(int64(cfg.InFlightCeiling))
	e.routes.Store(r)
	e.setProbing(cfg.Probe)
	return nil
}

// now is the marks' clock: monotonic time since the engine started.
func (e *Engine) now() time.Duration { return time.Since(e.epoch) }

// Response is a question's result. Msg is always set: the answer, or the
// SERVFAIL a client gets for an unavailable question. Its ID is the
// client's. Msg's header, question, sections and OPT record are this
// question's own; the records in its sections may be shared with the cache
// and other questions and must not be changed (the slices are capped, so
// appending is safe).
type Response struct {
	Msg      *dns.Msg
	Result   Result
	Reason   Reason // why, for ResultUnavailable
	Question uint64 // the question's id, as in its events
	Scope    string
	Attempts int
	// Upstream is the time this question's own attempts took, together.
	Upstream time.Duration
	CacheHit bool
	// Shared is set when the answer came from an identical question
	// upstream at the same time (no attempt of its own).
	Shared bool
}

// Resolve answers one client query. The front end has checked it: opcode
// QUERY and exactly one question. ctx is the client's budget.
func (e *Engine) Resolve(ctx context.Context, q *dns.Msg) Response {
	start := time.Now()
	rt := e.routes.Load() // one configuration for the whole question
	qs := q.Question[0]
	qn := question{
		e:      e,
		ctx:    ctx,
		cfg:    rt.cfg,
		routes: rt,
		client: q,
		id:     e.questionIDs.Add(1),
		scope:  rt.route(qs.Name),
		start:  start,
		trace:  TraceFrom(ctx),
	}
	qn.setBudget(start)
	resp := qn.resolve()
	resp.Question, resp.Scope, resp.Attempts, resp.Upstream = qn.id, qn.scope.name, qn.spent, qn.upstream
	if resp.Msg == nil {
		resp.Msg = unavailableReply(q, resp.Reason, &qn.tried, rt.cfg.EDEHideServers)
	}
	resp.Msg.Id = q.Id
	e.counters.questions[resp.Result].Add(1)
	ev := QuestionEvent{
		Question: qn.id, QName: qs.Name, QType: qs.Qtype, Scope: qn.scope.name,
		Result: resp.Result, Reason: resp.Reason, Attempts: qn.spent,
		CacheHit: resp.CacheHit, Duration: time.Since(start),
		Trace: qn.trace,
	}
	if qn.shared != nil {
		ev.Joined, ev.Served = qn.shared.joined, qn.shared.served
	}
	e.observer.Question(ev)
	return resp
}

// sharedTraces are the traces of the questions one question shared an
// upstream question with: the one it waited for (joined), those that
// waited for it (served).
type sharedTraces struct {
	joined *Trace
	served []*Trace
}

// question is one client question on its way through the attempts.
type question struct {
	e      *Engine
	ctx    context.Context
	cfg    *Config
	client *dns.Msg
	id     uint64
	scope  *scope
	routes *routes   // the configuration the question started with
	start  time.Time // when it started: the clock of its cache lookups
	spent  int       // attempts spent, across candidates and transports

	// tried records the attempts for the Extended DNS Error of an
	// unavailable answer (a coalesced question takes its leader's);
	// upstream is the time they took.
	tried    tried
	upstream time.Duration

	// trace is the client's trace (nil: none); shared, made only when
	// the question shares an upstream question, says with whom.
	trace  *Trace
	shared *sharedTraces

	// budgetEnd is the earlier of the client's deadline and the question
	// timeout (zero: neither); budgetBy says which.
	budgetEnd time.Time
	budgetBy  budget
}

func (qn *question) setBudget(start time.Time) {
	if qn.cfg.QuestionTimeout > 0 {
		qn.budgetEnd, qn.budgetBy = start.Add(qn.cfg.QuestionTimeout), budgetQuestion
	}
	if d, ok := qn.ctx.Deadline(); ok && (qn.budgetEnd.IsZero() || d.Before(qn.budgetEnd)) {
		qn.budgetEnd, qn.budgetBy = d, budgetClient
	}
}

// ended returns the response of a question whose budget ran out: the
// client's (cancelled) or the question's own (unavailable).
func (qn *question) ended() Response {
	if qn.ctx.Err() != nil || qn.budgetBy == budgetClient {
		return Response{Result: ResultCancelled, Reason: ReasonQuestionTimeout}
	}
	return Response{Result: ResultUnavailable, Reason: ReasonQuestionTimeout}
}

// clientReply shapes an upstream reply for the client: its OPT record goes
// when the client sent none (RFC 6891). The ID is set by Resolve.
func clientReply(client, reply *dns.Msg) *dns.Msg {
	if client.IsEdns0() == nil {
		extra := reply.Extra[:0]
		for _, rr := range reply.Extra {
			if rr.Header().Rrtype != dns.TypeOPT {
				extra = append(extra, rr)
			}
		}
		reply.Extra = extra
	}
	return reply
}
