package engine

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dohfwd/dohfwd/engine/dnswire"
	"github.com/dohfwd/dohfwd/engine/wiretap"
)

// Engine answers questions by forwarding them upstream under the resolvd
// rules. It is safe for concurrent use; each question runs on its caller's
// goroutine.
type Engine struct {
	network  Network
	observer Observer
	wiretap  wiretap.Tap // nil: off
	first    Transport   // UDP, or TCP under Options.TCPOnly
	reuse    bool        // the Network's UDP sockets may be pooled (pool.go)
	openNow  bool        // the Network's TCP Open returns at once (ConnectsLater)
	epoch    time.Time   // the marks' clock starts here (monotonic)

	routes   atomic.Pointer[routes]
	inFlight inFlight
	clients  ClientLimiter // nil: no per-client share
	counters counters

	questionIDs atomic.Uint64

	// publish receives the cache entries whose hits became pure reads
	// (PublishHotEntries); nil, natively, publishes nothing.
	publish     func(record []byte)
	generations uint32 // the last routes' generation; under mu

	mu        sync.Mutex           // guards upstreams and prober during Reconfigure
	upstreams map[string]*upstream // by Endpoint.String()
	prober    *prober              // running while Config.Probe is on

	up upLoopHolder // the upstream loop (uploop_linux.go)
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
	// ClientLimit, if set, bounds each client's transactions in flight
	// (see WithClient); nil leaves only the ceiling.
	ClientLimit ClientLimiter
	// Wiretap, if set, is handed each upstream attempt's query and reply
	// (dnstap's FORWARDER_QUERY and FORWARDER_RESPONSE); nil: none.
	Wiretap wiretap.Tap
}

// New returns an engine for cfg.
func New(cfg Config, opts Options) (*Engine, error) {
	if opts.Network == nil {
		return nil, errors.New("engine: no Network")
	}
	e := &Engine{
		network:   opts.Network,
		observer:  opts.Observer,
		clients:   opts.ClientLimit,
		wiretap:   opts.Wiretap,
		epoch:     time.Now(),
		upstreams: map[string]*upstream{},
	}
	if e.observer == nil {
		e.observer = nopObserver{}
	}
	if opts.TCPOnly {
		e.first = TCP
	}
	if r, ok := opts.Network.(SocketReuser); ok {
		e.reuse = r.ReusesUDPSockets()
	}
	if c, ok := opts.Network.(ConnectsLater); ok {
		e.openNow = c.ConnectsLater()
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
	next := map[string]*upstream{}
	known := func(ep Endpoint) *upstream {
		k := ep.String()
		if u := next[k]; u != nil {
			return u
		}
		u := e.upstreams[k]
		if u == nil {
			u = newUpstream(ep)
		}
		next[k] = u
		return u
	}
	r, err := buildRoutes(cfg, known)
	if err != nil {
		return err
	}
	r.takeCache(e.routes.Load())
	e.generations++
	r.generation = e.generations
	// A server that leaves takes its idle sockets with it; its busy ones
	// close as their transactions end.
	for ap, u := range e.upstreams {
		if next[ap] == nil {
			u.pools.close()
			u.loopPools.close()
			u.closeEncrypted(true)
		}
	}
	e.upstreams = next
	e.inFlight.ceiling.Store(int64(cfg.InFlightCeiling))
	e.routes.Store(r)
	e.setProbing(cfg.Probe)
	return nil
}

// now is the marks' clock: monotonic time since the engine started.
func (e *Engine) now() time.Duration { return time.Since(e.epoch) }

// Response is a question's result.
//
// Wire is the client's reply: the client's ID, an OPT record when the
// client sent one, padded to a multiple of PaddingBlock when the query was
// padded. It is empty (and Rcode -1) when the query did not read.
type Response struct {
	Wire []byte
	// Rcode is the reply's rcode, extended bits included.
	Rcode int
	// TTL is the answer's TTL as the reply carries it, for Cache-Control;
	// Cacheable is false when the reply must not be kept (SERVFAIL,
	// unavailable, a negative answer without SOA). See answerTTL; a stale
	// answer's, negative or not, is the stale TTL (staleReplyTTL).
	TTL       uint32
	Cacheable bool
	Result    Result
	Reason    Reason // why, for ResultUnavailable
	Question  uint64 // the question's id, as in its events
	// QName is the question's name as its events give it (Resolve,
	// AnswerNow): a front end that shows it need not make its own.
	QName    string
	Scope    string
	Attempts int
	// Upstream is the time this question's own attempts took, together.
	Upstream time.Duration
	CacheHit bool
	// Shared is set when the answer came from an identical question
	// upstream at the same time (no attempt of its own).
	Shared bool
	// Answered is the question's end (Resolve, ResolveMiss,
	// AnswerNow): the end of the question event's Duration,
	// for a front end that needs the time then and need not read the
	// clock again. It is the engine's last clock reading: for an answer
	// or NXDOMAIN from the question's own last transaction, that
	// transaction's end (its RTT's end; the entry, the cache and the
	// reply are written after it without another reading); for a
	// question that waited for an identical one's flight, when it woke;
	// else when the reply was written.
	Answered time.Time
}

// Resolve answers one client query given as bytes, appending the
// client's reply to dst (Response.Wire): from memory, or upstream,
// waiting for the answer. Use it where a question may wait on the
// caller's goroutine (the DNS server, the JSON form, tests); a front end
// that must not block its reader asks AnswerNow there first and hands
// the miss on (ResolveMiss). It is the one form for every query, the
// compressed question names AnswerNow leaves alone included. The front
// end has checked the query: opcode QUERY and exactly one question. ctx
// is the client's budget. On the forwarding path nothing is unpacked: the upstream's
// reply is matched from its header and question, read by a walk of its
// records, kept packed and copied out with the client's ID.
func (e *Engine) Resolve(ctx context.Context, query []byte, dst []byte) (resp Response) {
	start := time.Now()
	rt := e.routes.Load() // one configuration for the whole question
	qn := question{
		e:      e,
		ctx:    ctx,
		cfg:    rt.cfg,
		routes: rt,
		id:     e.questionIDs.Add(1),
		start:  start,
		trace:  TraceFrom(ctx),
		proto:  ProtoFrom(ctx),
	}
	if !qn.client.parse(query) {
		// A compressed question name: rare enough to copy the query.
		cq, ok := unpackedQuery(query)
		if !ok {
			return Response{Wire: dst, Rcode: -1, Result: ResultUnavailable, Reason: ReasonAttemptsSpent}
		}
		qn.client = *cq
	}
	qn.scope = rt.route(qn.client.name)
	qn.setBudget(start)
	var f found
	qn.resolve(&f)
	qn.respond(&resp, dst, &f)
	qn.release()
	return resp
}

// release gives back the buffers the question held (held), once nothing
// reads its entry.
func (qn *question) release() {
	if qn.held != nil {
		askBuffersPool.Put(qn.held)
		qn.held = nil
	}
}

// respond sets *resp: it writes the client's reply for f after dst, counts
// the question and reports its event. Not inlined: its locals (the
// reply's walk, the event) stay off the stack while the question runs,
// which keeps a question's goroutine within its first stack size (see
// BenchmarkInFlight4096). It fills the caller's Response rather than
// returning one, so the frames below the question's (Resolve's) hold
// no room for a second Response either.
//
// Every field of *resp is set one by one (a field added to Response must
// be set here too): as WebAssembly a composite literal's zeroing and copy
// are calls to the host's memmove, several for a struct this size.
//
//go:noinline
func (qn *question) respond(resp *Response, dst []byte, f *found) {
	e, cq := qn.e, &qn.client
	resp.Result, resp.Reason, resp.CacheHit, resp.Shared = f.result, f.reason, f.cacheHit, f.shared
	resp.Question, resp.QName, resp.Scope, resp.Attempts, resp.Upstream = qn.id, cq.name, qn.scope.name, qn.spent, qn.upstream
	resp.Wire = qn.writeReply(dst, f)
	if f.ends {
		resp.Answered = f.at // the question's last reading (found.ends)
	} else {
		resp.Answered = time.Now()
	}
	resp.Rcode, resp.TTL, resp.Cacheable = qn.replyFacts(resp.Wire[len(dst):], f)
	e.counters.questions[resp.Result].Add(1)
	if resp.Result == ResultStale {
		e.counters.stale[resp.Reason].Add(1)
	}
	ev := QuestionEvent{
		Question: qn.id, QName: cq.name, QType: cq.qtype, Scope: qn.scope.name,
		Result: resp.Result, Reason: resp.Reason, Attempts: qn.spent,
		CacheHit: resp.CacheHit, Duration: resp.Answered.Sub(qn.start),
		Trace: qn.trace, Proto: qn.proto,
	}
	ev.End = qn.start.Add(ev.Duration) // the wall time without another clock reading
	if qn.shared != nil {
		ev.Joined, ev.Served = qn.shared.joined, qn.shared.served
	}
	e.observer.Question(ev)
}

// replyFacts are the rcode and answerTTL of reply, the client's reply
// writeReply made for f: from its entry's facts when it has them (no walk
// of the reply), else from a walk. A stale answer's TTL is the stale TTL
// whatever its rcode (staleReplyTTL).
func (qn *question) replyFacts(reply []byte, f *found) (rcode int, ttl uint32, cacheable bool) {
	staleTTL := int64(-1)
	if f.result == ResultStale {
		staleTTL = int64(qn.cfg.Cache.StaleTTL / time.Second)
	}
	if f.en != nil {
		if rcode, ttl, cacheable, ok := f.en.replyFacts(f.at, staleTTL); ok {
			return rcode, staleReplyTTL(ttl, cacheable, staleTTL), cacheable
		}
	}
	w, _ := walkReply(reply, nil)
	ttl, cacheable = answerTTL(w.facts)
	return w.rcode, staleReplyTTL(ttl, cacheable, staleTTL), cacheable
}

// writeReply appends the client's reply for f to dst.
func (qn *question) writeReply(dst []byte, f *found) []byte {
	cq := &qn.client
	switch {
	case f.en != nil:
		return qn.appendEntry(dst, f, cq.qname)
	case f.reply != nil:
		return appendMade(dst, f.reply, cq)
	}
	return appendMade(dst, unavailableReply(cq, f.reason, qn.tried, qn.cfg.EDEHideServers), cq)
}

// appendEntry appends the client's reply from f's entry: its stale form
// for a stale answer; qname as for appendReply.
func (qn *question) appendEntry(dst []byte, f *found, qname []byte) []byte {
	if f.result == ResultStale {
		return f.en.appendStale(dst, &qn.client, qname, qn.cfg.Cache.StaleTTL)
	}
	return f.en.appendReply(dst, &qn.client, qname, f.at)
}

// unpackedQuery reads a query that parseQuery cannot read (a compressed
// question name) from a copy with every name written out in full.
func unpackedQuery(raw []byte) (*clientQuery, bool) {
	p, ok := dnswire.NewParser(raw)
	if !ok || p.Header().Counts[0] != 1 {
		return nil, false
	}
	q, ok := p.Question()
	if !ok {
		return nil, false
	}
	plain := append(make([]byte, 0, len(raw)+dnswire.MaxNameLen), raw[:dnswire.HeaderLen]...)
	plain, _, err := dnswire.AppendNameWire(plain, raw, q.NameOff)
	if err != nil {
		return nil, false
	}
	plain = append(plain, raw[p.Offset()-4:p.Offset()]...)
	for {
		rr, more := p.Next()
		if !more {
			break
		}
		if plain, err = dnswire.AppendRRExpanded(plain, raw, rr); err != nil {
			return nil, false
		}
	}
	if p.Err() != nil {
		return nil, false
	}
	return parseQuery(plain)
}

// sharedTraces are the traces of the questions one question shared an
// upstream question with: the one it waited for (joined), those that
// waited for it (served).
type sharedTraces struct {
	joined *Trace
	served []*Trace

	// joinedTrace is joined's: the question's own copy of its flight's.
	joinedTrace Trace
}

// serve adds traces, a flight's (which goes back to its pool), to
// s.served as copies of the question's own.
func (s *sharedTraces) serve(traces []Trace) {
	own := append([]Trace(nil), traces...)
	for i := range own {
		s.served = append(s.served, &own[i])
	}
}

// question is one client question on its way through the attempts.
type question struct {
	e      *Engine
	ctx    context.Context
	cfg    *Config
	client clientQuery // by value: the question's own copy, on its stack
	id     uint64
	scope  *scope
	routes *routes   // the configuration the question started with
	start  time.Time // when it started: the clock of its cache lookups
	spent  int       // attempts spent, across candidates and transports

	// background marks a question no client asked (a prefetch): a
	// ceiling refusal is not counted as a client's.
	background bool

	// tried records the attempts for the Extended DNS Error of an
	// unavailable answer (a coalesced question takes its leader's);
	// upstream is the time they took.
	tried    *tried
	upstream time.Duration

	// trace is the client's trace (nil: none); shared, made only when
	// the question shares an upstream question, says with whom.
	trace  *Trace
	shared *sharedTraces
	// proto is the client's protocol (QuestionContext.SetProto), for the
	// events.
	proto string

	// held are the pooled buffers of the ask whose reply the question's
	// entry lies in (askBuffers.entry), kept until its reply is written:
	// with the cache off, an answer that no follower shares is never
	// copied out of them (heldEntry). Released by release.
	held *askBuffers

	// budgetEnd is the earlier of the client's deadline and the question
	// timeout (zero: neither); budgetBy says which.
	budgetEnd time.Time
	budgetBy  budget

	// led is the flight JoinFlight or StartMiss began for the question to
	// lead (its name as asked), taken by lookup; first, the buffers of
	// the first attempt StartMiss began, taken by ask.
	led   *flight
	first *askBuffers

	// subnet is the client's subnet an ECSAdd scope sends (invalid:
	// none); subnetShared says the answer came back for scope prefix 0,
	// for every client (ecs.go).
	subnet       netip.Prefix
	subnetShared bool
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
func (qn *question) ended() found {
	if qn.ctx.Err() != nil || qn.budgetBy == budgetClient {
		return found{result: ResultCancelled, reason: ReasonQuestionTimeout}
	}
	return found{result: ResultUnavailable, reason: ReasonQuestionTimeout}
}
