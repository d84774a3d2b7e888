package host

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dohfwd/dohfwd/edge/abi"
	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/telemetry"
)

// Pool is a fixed set of instances; a call borrows one and gives it back,
// so each instance serves one call at a time and the pool size bounds the
// questions in flight.
//
// Pool is the server's Backend (package server): Status, Counters and
// InFlight add up the instances, and Reconfigure reaches every instance.
// A status read never takes instances away from requests: it asks the
// instances that are free at that moment, and each busy one answers when
// its call ends, so its part lags by at most that call. Only Reconfigure
// borrows every instance at once and so waits for the calls in flight.
type Pool struct {
	rt     *Runtime
	config []byte // the YAML each new instance starts from
	free   chan *Instance
	// asked counts status reads; an instance whose snapshot is older
	// refreshes it when its call ends.
	asked atomic.Uint64

	mu       sync.Mutex
	all      []*Instance
	snaps    map[*Instance]snapshot // each instance's last status
	reloaded []byte                 // the engine.Config JSON of the last reload, for replacements
	busy     int64                  // calls in flight
}

// snapshot is an instance's status as of status read number asked.
type snapshot struct {
	status abi.Status
	asked  uint64
}

// NewPool starts size instances configured with configYAML.
func NewPool(ctx context.Context, rt *Runtime, configYAML []byte, size int) (*Pool, error) {
	if size < 1 {
		return nil, fmt.Errorf("edge: pool size %d: want at least 1", size)
	}
	p := &Pool{rt: rt, config: configYAML, free: make(chan *Instance, size), snaps: map[*Instance]snapshot{}}
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
	if in != nil && p.stale(in) {
		p.refresh(context.WithoutCancel(ctx), in)
	}
	p.mu.Lock()
	p.busy--
	p.mu.Unlock()
	if in != nil {
		p.free <- in
	}
	return out, err
}

// stale reports whether a status read has been asked for since in's
// snapshot.
func (p *Pool) stale(in *Instance) bool {
	asked := p.asked.Load()
	if asked == 0 {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.snaps[in]
	return !ok || s.asked < asked
}

// refresh reads the status of in, which the caller holds.
func (p *Pool) refresh(ctx context.Context, in *Instance) error {
	asked := p.asked.Load()
	b, err := in.Status(ctx)
	if err != nil {
		return err
	}
	var st abi.Status
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("edge: status: %w", err)
	}
	p.mu.Lock()
	if _, ok := p.snaps[in]; ok || slices.Contains(p.all, in) {
		p.snaps[in] = snapshot{status: st, asked: asked}
	}
	p.mu.Unlock()
	return nil
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
	delete(p.snaps, old)
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

// Statuses returns each instance's engine status without waiting for the
// calls in flight (see snapshots).
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

// snapshots returns each instance's status without waiting for the calls
// in flight: the instances free now are asked at once (each borrowed for
// that one status call); a busy instance contributes the status it gave
// when its last call ended.
func (p *Pool) snapshots(ctx context.Context) ([]abi.Status, error) {
	p.asked.Add(1)
	var firstErr error
	for range len(p.free) {
		var in *Instance
		select {
		case in = <-p.free:
		default:
		}
		if in == nil {
			break
		}
		err := p.refresh(ctx, in)
		p.free <- in
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]abi.Status, 0, len(p.all))
	for _, in := range p.all {
		if s, ok := p.snaps[in]; ok {
			out = append(out, s.status)
		}
	}
	return out, firstErr
}

// statusTimeout bounds how long the admin endpoints wait for an instance.
const statusTimeout = 10 * time.Second

// Status is the pool as one engine (engine.MergeStatuses).
func (p *Pool) Status() engine.Status {
	ctx, cancel := context.WithTimeout(context.Background(), statusTimeout)
	defer cancel()
	all, _ := p.Statuses(ctx)
	return engine.MergeStatuses(all)
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

// Close ends every instance.
func (p *Pool) Close(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, in := range p.all {
		in.Close(ctx)
	}
	p.all = nil
}
