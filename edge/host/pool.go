package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dohfwd/dohfwd/doh"
	"github.com/dohfwd/dohfwd/doh/config"
	"github.com/dohfwd/dohfwd/edge/abi"
	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/telemetry"
)

// Pool is the host's module instances: one by default, which holds the one
// engine, so every request shares its cache, coalescing and demotion
// marks. A question (or a whole request) goes to the instance with the
// fewest in progress; an instance that traps is replaced.
//
// Pool is the DoH front end's resolver (doh.Resolver: Resolve), so
// the host serves DoH with the native handler and hands the module only
// questions; and, as the native engine, a doh.MissStarter: a question the
// module cannot answer at once is begun on the HTTP/2 reader and finished
// where the poll that brings its answer runs (see start). It is also
// the server's Backend (package server): Status, Counters and InFlight
// add up the instances, and a reload reaches every instance whole
// (Reload).
type Pool struct {
	rt *Runtime

	// configuring is held while the configuration changes (Reload) and
	// while an instance is started to replace another, so a replacement
	// never misses a reload.
	configuring sync.Mutex
	config      []byte // encoded (config.Encode): what a new instance starts from, the last reload's

	mu  sync.Mutex
	all []*Instance

	answeredInline atomic.Uint64 // by AnswerNow, for tests

	hits *hotEntries // the native hits (Options.NativeHits); nil: none
}

// The DoH front end's interfaces, as the native engine's.
var (
	_ doh.ImmediateResolver = (*Pool)(nil)
	_ doh.MissStarter       = (*Pool)(nil)
)

// NewPool starts size instances configured with configYAML.
func NewPool(ctx context.Context, rt *Runtime, configYAML []byte, size int) (*Pool, error) {
	if size < 1 {
		return nil, fmt.Errorf("edge: pool size %d: want at least 1", size)
	}
	encoded, err := encodeYAML(configYAML)
	if err != nil {
		return nil, err
	}
	p := &Pool{rt: rt, config: encoded}
	if rt.opts.NativeHits {
		if p.hits, err = newHotEntries(encoded, rt.opts.Stderr); err != nil {
			return nil, err
		}
	}
	for range size {
		in, err := rt.newInstance(ctx, encoded, p.hits)
		if err != nil {
			p.Close(ctx)
			return nil, err
		}
		p.all = append(p.all, in)
	}
	return p, nil
}

// pick returns the instance with the fewest requests in progress.
func (p *Pool) pick() *Instance {
	p.mu.Lock()
	defer p.mu.Unlock()
	var best *Instance
	for _, in := range p.all {
		if best == nil || in.InFlight() < best.InFlight() {
			best = in
		}
	}
	return best
}

// Serve runs one encoded request. An instance whose module failed (a
// trap) is replaced; the requests it held fail.
func (p *Pool) Serve(ctx context.Context, req []byte) ([]byte, error) {
	in := p.pick()
	if in == nil {
		return nil, errClosed
	}
	out, err := in.Serve(ctx, req)
	if err != nil && ctx.Err() == nil && !errors.Is(err, errClosed) {
		p.replace(context.WithoutCancel(ctx), in)
	}
	return out, err
}

// AnswerNow answers query at once when the module's engine can
// (abi.ExportAsk: a cache hit, a local name) and the instance it picks is
// free, as doh.ImmediateResolver asks: the DoH front end asks it on the
// connection's own goroutine first, as it asks the native engine, so a
// hit takes no goroutine of its own and its reply goes out with the
// connection's other writes. A hot cache entry the native mirror holds
// (hits.go) is answered before any instance is asked. Otherwise it
// reports false, and miss holds the query (engine.Miss.Hold: a pooled
// call) for StartMiss and ResolveMiss, which the front end calls
// next as for the native engine's miss; the query's bytes stay as they
// are until then.
func (p *Pool) AnswerNow(query, dst []byte, trace *engine.Trace, miss *engine.Miss) (engine.Response, bool) {
	if r, ok := p.answerHit(query, dst, trace); ok {
		return r, true
	}
	in := p.pick()
	if in == nil || len(query) == 0 {
		return engine.Response{}, false
	}
	q := abi.Query{Wire: query}
	if trace != nil {
		q.Trace, q.HasTrace = *trace, true
	}
	r, asked, ok, err := in.askNow(&q, dst, true)
	switch {
	case err != nil:
		p.replace(context.Background(), in)
		return engine.Response{}, false
	case ok:
		p.answeredInline.Add(1)
		return r, true
	}
	if miss != nil {
		c := getCall()
		c.query, c.asked, c.in = query, asked, in
		miss.Hold(c)
	}
	return engine.Response{}, false
}

// StartMiss begins the question AnswerNow left in m, on the
// caller's goroutine (the HTTP/2 reader), as doh.MissStarter asks: on an
// idle instance the module begins it within one dohfwd_ask
// (abi.QueryStart); with questions in progress it is queued for one poll
// with the read batch's other misses. Either way it is finished, once,
// where the poll that brings its answer runs (ResolveHere) or, for any
// other end, on a worker (ResolveElsewhere), and the front end calls
// ResolveMiss, which copies the answer. It reports false, leaving m
// for ResolveMiss (with the answer when the module had it at once),
// when a busy instance's asks still answer (hits likely: the worker's
// way asks it at once), or the instance failed, closed or could not be
// entered.
func (p *Pool) StartMiss(ctx context.Context, m *engine.Miss, then engine.MissContinuation) bool {
	c, _ := m.Held().(*call)
	if c == nil || c.in == nil || ctx.Err() != nil {
		return false
	}
	return c.in.start(ctx, c, then)
}

// ResolveMiss answers the question AnswerNow left in m:
// the answer StartMiss's question was given, copied to dst (it is out of
// the module already: only a copy is left), or, for a question not
// begun, Resolve's way (a poll) without asking the module at once
// again when it was asked already. It empties m.
func (p *Pool) ResolveMiss(ctx context.Context, m *engine.Miss, dst []byte) engine.Response {
	c, _ := m.Held().(*call)
	*m = engine.Miss{}
	if c == nil {
		return unanswered(dst, engine.ResultUnavailable)
	}
	if !c.answered {
		query, ask := c.query, !c.asked
		putCall(c)
		return p.resolve(ctx, query, dst, ask)
	}
	in, err, r := c.in, c.err, c.resp
	if err == nil {
		r.Wire = append(dst, c.wire...)
	}
	putCall(c)
	switch {
	case err == nil:
		return r
	case ctx.Err() != nil:
		return unanswered(dst, engine.ResultCancelled)
	case !errors.Is(err, errClosed):
		p.replace(context.WithoutCancel(ctx), in)
	}
	return unanswered(dst, engine.ResultUnavailable)
}

// Resolve answers one checked query with an instance's engine, as
// doh.Resolver asks: the reply appended to dst; a hot entry the native
// mirror holds is answered first, natively (answerHit). It hands the engine what
// the front end put in ctx, as natively: the client (engine.WithClient,
// for its share of upstream transactions) and the trace. When ctx ends
// first the instance's question ends as natively (cancelled, not charged
// to the server) and the answer is ResultCancelled with no reply. When the
// instance fails (a trap: it is replaced) the reply is empty, which the
// front end answers as SERVFAIL.
func (p *Pool) Resolve(ctx context.Context, query, dst []byte) engine.Response {
	if r, ok := p.answerHit(query, dst, engine.TraceFrom(ctx)); ok {
		return r
	}
	return p.resolve(ctx, query, dst, true)
}

// resolve is Resolve, by a poll alone unless ask.
func (p *Pool) resolve(ctx context.Context, query, dst []byte, ask bool) engine.Response {
	q := abi.Query{Wire: query, Client: engine.ClientOf(ctx)}
	if t := engine.TraceFrom(ctx); t != nil {
		q.Trace, q.HasTrace = *t, true
	}
	in := p.pick()
	if in == nil {
		return unanswered(dst, engine.ResultUnavailable)
	}
	r, err := in.resolve(ctx, &q, dst, ask)
	if err == nil {
		return r
	}
	if ctx.Err() != nil {
		return unanswered(dst, engine.ResultCancelled)
	}
	if !errors.Is(err, errClosed) {
		p.replace(context.WithoutCancel(ctx), in)
	}
	return unanswered(dst, engine.ResultUnavailable)
}

// unanswered is a Response with no reply.
func unanswered(dst []byte, result engine.Result) engine.Response {
	return engine.Response{Wire: dst, Rcode: -1, Result: result, Answered: time.Now()}
}

// replace closes a broken instance and starts a fresh one in its place,
// from the configuration of the last reload; when that fails the pool is
// one smaller.
func (p *Pool) replace(ctx context.Context, old *Instance) {
	p.configuring.Lock()
	defer p.configuring.Unlock()
	p.mu.Lock()
	i := -1
	for j, x := range p.all {
		if x == old {
			i = j
		}
	}
	if i < 0 { // replaced already
		p.mu.Unlock()
		return
	}
	p.all = append(p.all[:i], p.all[i+1:]...)
	p.mu.Unlock()
	old.Close(ctx)
	fresh, err := p.rt.newInstance(ctx, p.config, p.hits)
	if err != nil {
		return
	}
	p.mu.Lock()
	p.all = append(p.all, fresh)
	p.mu.Unlock()
}

func (p *Pool) instances() []*Instance {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*Instance(nil), p.all...)
}

// snapshots returns each instance's status. An instance answers between
// two polls, so a read waits for no question.
func (p *Pool) snapshots(ctx context.Context) ([]abi.Status, error) {
	var out []abi.Status
	var firstErr error
	for _, in := range p.instances() {
		b, err := in.Status(ctx)
		var st abi.Status
		if err == nil {
			err = json.Unmarshal(b, &st)
		}
		if err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("edge: status: %w", err)
			}
			continue
		}
		out = append(out, st)
	}
	return out, firstErr
}

// Statuses returns each instance's engine status.
func (p *Pool) Statuses(ctx context.Context) ([]engine.Status, error) {
	all, err := p.snapshots(ctx)
	out := make([]engine.Status, len(all))
	for i, st := range all {
		out[i] = st.Status
	}
	return out, err
}

// AttemptLatency adds up the instances' attempt latencies by server, for
// the host's dohfwd_upstream_attempt_duration_seconds.
func (p *Pool) AttemptLatency() map[string]telemetry.Histogram {
	ctx, cancel := context.WithTimeout(context.Background(), statusTimeout)
	defer cancel()
	all, _ := p.snapshots(ctx)
	out := map[string]telemetry.Histogram{}
	for _, st := range all {
		for server, h := range st.AttemptLatency {
			sum := out[server]
			sum.Add(h)
			out[server] = sum
		}
	}
	return out
}

// statusTimeout bounds how long the admin endpoints wait for an instance.
const statusTimeout = 10 * time.Second

// Status is the pool as one engine (engine.MergeStatuses).
func (p *Pool) Status() engine.Status {
	ctx, cancel := context.WithTimeout(context.Background(), statusTimeout)
	defer cancel()
	all, _ := p.Statuses(ctx)
	st := engine.MergeStatuses(all)
	st.Counters.Add(p.hitCounters())
	return st
}

// Counters adds up the instances' counters.
func (p *Pool) Counters() engine.Counters { return p.Status().Counters }

// InFlight is the number of requests the instances are answering.
func (p *Pool) InFlight() int64 {
	var n int64
	for _, in := range p.instances() {
		n += in.InFlight()
	}
	return n
}

// Reload hands every instance a reloaded configuration whole
// (abi.ExportReload), as package server reloads its Backend: each
// instance applies it as dohfwd serve does (its engine, log level and
// limits), or refuses it when its engine does. The first refusal stops
// the reload and is returned; the instances keep their configuration
// (with one instance, the default, the pool's is unchanged; with more,
// those before the refusing one took it, but an engine refuses a
// configuration the same way in every instance, so the first one does).
// Replacements start from the last configuration taken.
func (p *Pool) Reload(cfg *config.Config) error {
	encoded, err := config.Encode(cfg)
	if err != nil {
		return fmt.Errorf("edge: reload: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), statusTimeout)
	defer cancel()
	p.configuring.Lock()
	defer p.configuring.Unlock()
	all := p.instances()
	var took func()
	switch {
	case p.hits != nil && len(all) == 1:
		// The mirror takes the configuration with the module, before any
		// poll or ask runs under it: no record of either is dropped, and a
		// refused reload leaves the mirror as it is.
		took = func() { p.hits.reconfigure(encoded) }
	case p.hits != nil:
		// Until every module runs the new configuration, a record may be
		// of either; reconfigured to what they run after.
		p.hits.suspend()
		defer func() { p.hits.reconfigure(p.config) }()
	}
	for _, in := range all {
		if err := in.Reload(ctx, encoded, took); err != nil {
			return err
		}
	}
	p.config = encoded
	return nil
}

// Close ends every instance.
func (p *Pool) Close(ctx context.Context) {
	p.mu.Lock()
	all := p.all
	p.all = nil
	p.mu.Unlock()
	for _, in := range all {
		in.Close(ctx)
	}
}
