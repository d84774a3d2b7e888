package host

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/dohfwd/dohfwd/engine"
)

// Pool is a fixed set of instances; a call borrows one and gives it back,
// so each instance serves one call at a time and the pool size is the
// number of questions in flight.
type Pool struct {
	rt     *Runtime
	config []byte
	free   chan *Instance

	mu  sync.Mutex
	all []*Instance
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
	out, err := in.Serve(context.WithoutCancel(ctx), req)
	if err != nil {
		in = p.replace(ctx, in)
	}
	if in != nil {
		p.free <- in
	}
	return out, err
}

// replace closes a broken instance and starts a fresh one in its place.
func (p *Pool) replace(ctx context.Context, old *Instance) *Instance {
	old.Close(ctx)
	fresh, err := p.rt.NewInstance(context.WithoutCancel(ctx), p.config)
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

// Status returns each instance's engine status. It borrows every instance
// in turn, so it waits for calls in flight.
func (p *Pool) Status(ctx context.Context) ([]engine.Status, error) {
	p.mu.Lock()
	n := len(p.all)
	p.mu.Unlock()
	out := make([]engine.Status, 0, n)
	for range n {
		var in *Instance
		select {
		case in = <-p.free:
		case <-ctx.Done():
			return out, ctx.Err()
		}
		b, err := in.Status(ctx)
		p.free <- in
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

// Close ends every instance.
func (p *Pool) Close(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, in := range p.all {
		in.Close(ctx)
	}
	p.all = nil
}
