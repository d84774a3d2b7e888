package host

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/dohfwd/dohfwd/engine"
)

// Pool is a fixed set of instances; a call borrows one and gives it back,
// so each instance serves one call at a time and the pool size bounds the
// questions in flight.
//
// Pool is the server's Backend (package server): Status, Counters and
// InFlight add up the instances, and Reconfigure reaches every instance.
// Those borrow every instance at once, so they wait for the calls in
// flight (at most one question, about 6 s).
type Pool struct {
	rt     *Runtime
	config []byte // the YAML each new instance starts from
	free   chan *Instance

	mu       sync.Mutex
	all      []*Instance
	reloaded []byte // the engine.Config JSON of the last reload, for replacements
	busy     int64  // calls in flight
}

// NewPool starts size instances configured with configYAML.
func NewPool(ctx context.Context, rt *Runtime, configYAML []byte, size int) (*Pool, error) {
	if size < 1 {
		return nil, fmt.Errorf("edge: pool size %d: want at least 1", size)
	}
	p := &Pool{rt: rt, config: configYAML, free: make(chan *Instance, size)}
	for range size {
		in, err := rt.NewInstance(ctx, configYAML)
		if err != nil {
			p.Close(ctx)
			return nil, err
		}
		p.all = append(p.all, in)
		p.free <- in
	}
	return p, nil
}

// Serve runs one encoded request on a free instance, waiting for one
// while ctx lasts. An instance whose call failed (a trap) is replaced.
func (p *Pool) Serve(ctx context.Context, req []byte) ([]byte, error) {
	var in *Instance
	select {
	case in = <-p.free:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	p.mu.Lock()
	p.busy++
	p.mu.Unlock()
	// The module is not interrupted midway: ctx reaches only its socket
	// imports, which end the question when the client goes.
	out, err := in.Serve(ctx, req)
	if err != nil {
		in = p.replace(context.WithoutCancel(ctx), in)
	}
	p.mu.Lock()
	p.busy--
	p.mu.Unlock()
	if in != nil {
		p.free <- in
	}
	return out, err
}

// replace closes a broken instance and starts a fresh one in its place;
// nil when that fails, and the pool is one smaller.
func (p *Pool) replace(ctx context.Context, old *Instance) *Instance {
	old.Close(ctx)
	fresh, err := p.rt.NewInstance(ctx, p.config)
	p.mu.Lock()
	reloaded := p.reloaded
	p.mu.Unlock()
	if err == nil && reloaded != nil {
		err = fresh.Reconfigure(ctx, reloaded)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, x := range p.all {
		if x == old {
			if err != nil {
				p.all = append(p.all[:i], p.all[i+1:]...)
				return nil
			}
			p.all[i] = fresh
		}
	}
	return fresh
}

// holdAll borrows every instance; release gives them back.
func (p *Pool) holdAll(ctx context.Context) (held []*Instance, release func(), err error) {
	p.mu.Lock()
	n := len(p.all)
	p.mu.Unlock()
	release = func() {
		for _, in := range held {
			p.free <- in
		}
	}
	for range n {
		select {
		case in := <-p.free:
			held = append(held, in)
		case <-ctx.Done():
			release()
			return nil, func() {}, ctx.Err()
		}
	}
	return held, release, nil
}

// Statuses returns each instance's engine status.
func (p *Pool) Statuses(ctx context.Context) ([]engine.Status, error) {
	held, release, err := p.holdAll(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	out := make([]engine.Status, 0, len(held))
	for _, in := range held {
		b, err := in.Status(ctx)
		if err != nil {
			return out, err
		}
		var st engine.Status
		if err := json.Unmarshal(b, &st); err != nil {
			return out, fmt.Errorf("edge: status: %w", err)
		}
		out = append(out, st)
	}
	return out, nil
}

// statusTimeout bounds how long the admin endpoints wait for busy instances.
const statusTimeout = 10 * time.Second

// Status is the pool as one engine: the scopes of the first instance,
// a server shown demoted when any instance has it demoted (until the
// latest mark), and the counters and in-flight totals of all.
func (p *Pool) Status() engine.Status {
	ctx, cancel := context.WithTimeout(context.Background(), statusTimeout)
	defer cancel()
	all, _ := p.Statuses(ctx)
	return mergeStatus(all)
}

// Counters adds up the instances' counters.
func (p *Pool) Counters() engine.Counters { return p.Status().Counters }

// InFlight is the number of calls into instances under way: each is at
// most one upstream transaction.
func (p *Pool) InFlight() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.busy
}

// Reconfigure hands every instance the reloaded configuration. An instance
// that refuses it keeps its own; the first error is returned.
func (p *Pool) Reconfigure(cfg engine.Config) error {
	b, err := json.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("edge: reconfigure: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), statusTimeout)
	defer cancel()
	held, release, err := p.holdAll(ctx)
	if err != nil {
		return fmt.Errorf("edge: reconfigure: %w", err)
	}
	defer release()
	for _, in := range held {
		if err := in.Reconfigure(ctx, b); err != nil {
			return err
		}
	}
	p.mu.Lock()
	p.reloaded = b
	p.mu.Unlock()
	return nil
}

// mergeStatus folds the instances' statuses into one.
func mergeStatus(all []engine.Status) engine.Status {
	if len(all) == 0 {
		return engine.Status{Scopes: []engine.ScopeStatus{}, FallbackServers: []string{}}
	}
	out := all[0]
	out.Counters = engine.Counters{Attempts: map[string]uint64{}, Questions: map[string]uint64{}}
	out.InFlight, out.InFlightCeiling = 0, 0
	for i, st := range all {
		c := st.Counters
		out.Counters.UpstreamFailed += c.UpstreamFailed
		out.Counters.Refused += c.Refused
		out.Counters.Cancelled += c.Cancelled
		out.Counters.MismatchedReplies += c.MismatchedReplies
		out.Counters.CacheHits += c.CacheHits
		for k, v := range c.Attempts {
			out.Counters.Attempts[k] += v
		}
		for k, v := range c.Questions {
			out.Counters.Questions[k] += v
		}
		out.InFlight += st.InFlight
		out.InFlightCeiling += st.InFlightCeiling
		if i == 0 {
			continue
		}
		for si := range out.Scopes {
			if si >= len(st.Scopes) {
				break
			}
			for vi := range out.Scopes[si].Servers {
				if vi >= len(st.Scopes[si].Servers) {
					break
				}
				mine, theirs := &out.Scopes[si].Servers[vi], st.Scopes[si].Servers[vi]
				if theirs.Demoted && (!mine.Demoted || theirs.DemotedUntil.After(*mine.DemotedUntil)) {
					*mine = theirs
				}
			}
		}
	}
	return out
}

// Close ends every instance.
func (p *Pool) Close(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, in := range p.all {
		in.Close(ctx)
	}
	p.all = nil
}
