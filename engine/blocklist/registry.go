package blocklist

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultReload is how often a Registry's Watch looks for changed list
// files when the configuration sets no policies_reload.
const DefaultReload = time.Minute

// Registry holds the configured policies by name, across configuration
// reloads: a policy keeps its *Policy for as long as its name is
// configured, so whatever holds one (the engine) sees its new lists
// without being told.
type Registry struct {
	opt Options
	mu  sync.Mutex // one Apply at a time
	m   atomic.Pointer[map[string]*Policy]
}

// NewRegistry returns an empty Registry whose lists are read with opt.
func NewRegistry(opt Options) *Registry {
	r := &Registry{opt: opt}
	r.m.Store(&map[string]*Policy{})
	return r
}

// Apply makes specs the registry's policies (a configuration was loaded,
// or loaded again at SIGHUP): a new name is compiled, a known one is
// updated to its spec and its lists read again when they changed (as
// Reload(true) does), a name no longer configured goes. A list that
// cannot be read fails its policy: a known one keeps its old lists, a new
// one is left out. The errors are returned joined.
func (r *Registry) Apply(specs []Spec) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := *r.m.Load()
	next := make(map[string]*Policy, len(specs))
	var errs []error
	for _, s := range specs {
		if p, ok := old[s.Name]; ok {
			if err := p.update(s); err != nil {
				errs = append(errs, err)
			}
			next[s.Name] = p
			continue
		}
		p, err := New(s, r.opt)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		next[s.Name] = p
	}
	r.m.Store(&next)
	return errors.Join(errs...)
}

// Policy is the policy named name, or nil.
func (r *Registry) Policy(name string) *Policy { return (*r.m.Load())[name] }

// Policies are the registry's policies by name (a copy).
func (r *Registry) Policies() map[string]*Policy { return maps.Clone(*r.m.Load()) }

// Names are the registry's policy names, sorted.
func (r *Registry) Names() []string { return slices.Sorted(maps.Keys(*r.m.Load())) }

// ReloadEvent is one policy's reload: Changed when new lists were swapped
// in, Err when its lists could not be read (and were kept).
type ReloadEvent struct {
	Policy  string
	Changed bool
	Err     error
}

// Reload reloads every policy (Policy.Reload) and reports each that
// changed or failed.
func (r *Registry) Reload(force bool, report func(ReloadEvent)) {
	for _, name := range r.Names() {
		p := r.Policy(name)
		if p == nil {
			continue
		}
		changed, err := p.Reload(force)
		if (changed || err != nil) && report != nil {
			report(ReloadEvent{Policy: name, Changed: changed, Err: err})
		}
	}
}

// Watch reloads the policies whose files changed every interval (0 =
// DefaultReload, negative = never) until ctx ends.
func (r *Registry) Watch(ctx context.Context, every time.Duration, report func(ReloadEvent)) {
	if every == 0 {
		every = DefaultReload
	}
	if every < 0 {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.Reload(false, report)
		}
	}
}
