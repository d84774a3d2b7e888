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

	values   atomic.Pointer[Config] // engine values, with defaults
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
	e.values.Store(&cfg)
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
	CacheHit bool
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
	}
	qn.setBudget(start)
	resp := qn.resolve()
	resp.Question, resp.Scope, resp.Attempts = qn.id, qn.scope.name, qn.spent
	if resp.Msg == nil {
		resp.Msg = unavailableReply(q, resp.Reason)
	}
	resp.Msg.Id = q.Id
	e.counters.questions[resp.Result].Add(1)
	e.observer.Question(QuestionEvent{
		Question: qn.id, QName: qs.Name, QType: qs.Qtype, Scope: qn.scope.name,
		Result: resp.Result, Reason: resp.Reason, Attempts: qn.spent,
		CacheHit: resp.CacheHit, Duration: time.Since(start),
	})
	return resp
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

// maxStackServers is how many servers a scope may list before the
// per-attempt scratch space leaves the stack.
const maxStackServers = 16

// ask asks one candidate name: attempts one at a time, each to the server
// the order and the choice rule give, with a TCP retry to the same server
// after a truncated UDP reply.
func (qn *question) ask(name string) Response {
	e, cfg, servers := qn.e, qn.cfg, qn.scope.servers
	bp, err := packQuery(qn.client, name, cfg.ForwardECS)
	if err != nil {
		// Nothing can be sent for a name that does not pack; no server
		// is at fault.
		return Response{Result: ResultUnavailable, Reason: ReasonAttemptsSpent}
	}
	defer queryBuffers.Put(bp)
	wire := *bp

	var (
		untilBuf [maxStackServers]time.Duration
		orderBuf [maxStackServers]int
		askedBuf [maxStackServers]bool
	)
	until, order, asked := untilBuf[:0], orderBuf[:0], askedBuf[:0]
	if len(servers) > maxStackServers {
		until, order = make([]time.Duration, 0, len(servers)), make([]int, 0, len(servers))
		asked = make([]bool, 0, len(servers))
	}
	asked = asked[:len(servers)]

	n := 0              // attempts made for this candidate
	var tcpTo *upstream // set after a truncated UDP reply
	for {
		// Budget exhaustion is checked first: it is not a ceiling refusal.
		if qn.spent >= cfg.Attempts {
			return Response{Result: ResultUnavailable, Reason: ReasonAttemptsSpent}
		}
		now := time.Now()
		tx := transaction{query: wire, deadline: now.Add(cfg.TransactionTimeout), setBy: budgetTransaction}
		if qn.ctx.Err() != nil {
			return qn.ended()
		}
		if !qn.budgetEnd.IsZero() {
			if !qn.budgetEnd.After(now) {
				return qn.ended() // no time left: nothing is sent
			}
			if qn.budgetEnd.Before(tx.deadline) {
				tx.deadline, tx.setBy = qn.budgetEnd, qn.budgetBy
			}
		}
		pick := -1
		if tcpTo != nil {
			tx.server, tx.transport = tcpTo, TCP
			for i, s := range servers {
				if s == tcpTo {
					pick = i
					break
				}
			}
		} else {
			clock := e.now()
			until = until[:0]
			for _, s := range servers {
				until = append(until, s.markUntil())
			}
			order = serverOrder(order, until, clock)
			pick = chooseServer(order, asked, n)
			tx.server, tx.transport = servers[pick], e.first
		}
		tx.source = qn.scope.source(tx.server.addr)
		if !e.inFlight.acquire() {
			e.counters.refused.Add(1)
			return Response{Result: ResultUnavailable, Reason: ReasonInFlightCeiling}
		}
		sent := time.Now()
		res := e.exchange(qn.ctx, &tx)
		e.inFlight.release()
		rtt := time.Since(sent)

		qn.spent++
		n++
		asked[pick] = true
		tcpTo = nil
		demoted := false
		switch o := res.outcome; {
		case o == OutcomeAnswer || o == OutcomeNXDomain:
			tx.server.clear()
		case o == OutcomeTruncated:
			tcpTo = tx.server
		case o.failure():
			e.counters.upstreamFailed.Add(1)
			tx.server.demote(e.now(), cfg.DemotionPeriod)
			demoted = true
		case o == OutcomeLocalError:
			e.counters.upstreamFailed.Add(1)
		case o == OutcomeCancelled:
			e.counters.cancelled.Add(1)
		}
		e.counters.attempts[res.outcome].Add(1)
		qs := qn.client.Question[0]
		e.observer.Attempt(AttemptEvent{
			Question: qn.id, QName: name, QType: qs.Qtype, Scope: qn.scope.name,
			Attempt: qn.spent, Server: tx.server.addr, Transport: tx.transport,
			Outcome: res.outcome, Rcode: res.rcode, RTT: rtt, Demoted: demoted,
		})
		switch res.outcome {
		case OutcomeAnswer:
			return Response{Msg: clientReply(qn.client, res.reply), Result: ResultAnswer}
		case OutcomeNXDomain:
			return Response{Msg: clientReply(qn.client, res.reply), Result: ResultNXDomain}
		case OutcomeCancelled:
			return qn.ended()
		case OutcomeTruncated:
			if qn.spent >= cfg.Attempts {
				return Response{Result: ResultUnavailable, Reason: ReasonTruncated}
			}
		}
	}
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

// inFlight counts upstream transactions outstanding, against the ceiling.
type inFlight struct {
	n       atomic.Int64
	ceiling atomic.Int64
}

// acquire takes a slot, or reports that the ceiling is reached.
func (f *inFlight) acquire() bool {
	if f.n.Add(1) > f.ceiling.Load() {
		f.n.Add(-1)
		return false
	}
	return true
}

func (f *inFlight) release() { f.n.Add(-1) }
