package blocklist

import (
	"errors"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Policy is one configured policy whose lists may change while it
// serves: its compiled Set sits behind an atomic pointer, and a reload
// swaps in a whole new one. The engine keeps a *Policy for as long as the
// policy is configured; Match is safe at any time, during a reload too.
type Policy struct {
	set atomic.Pointer[Set]

	mu     sync.Mutex // one reload at a time; guards what follows
	spec   Spec
	opt    Options
	stamps map[string]stamp // per list file, as last compiled
}

// stamp is how a list file looked when last compiled: a reload reads a
// file whose size or modification time differs, and compiles again only
// when its contents' hash differs too.
type stamp struct {
	size int64
	mod  time.Time
	sum  uint64
}

var sumSeed = maphash.MakeSeed()

// New compiles spec's lists into a Policy. It fails only when a list
// cannot be read; bad lines go to opt.Bad.
func New(spec Spec, opt Options) (*Policy, error) {
	p := &Policy{opt: opt}
	if _, err := p.load(spec, true); err != nil {
		return nil, err
	}
	return p, nil
}

// Match reports whether name is blocked, and by which rule (Set.Match).
func (p *Policy) Match(name string) (Rule, bool) { return p.set.Load().Match(name) }

// Explain finds the rules that bear on name (Set.Explain).
func (p *Policy) Explain(name string) Explanation { return p.set.Load().Explain(name) }

// Set is the policy's lists as they are now.
func (p *Policy) Set() *Set { return p.set.Load() }

// Name is the policy's configured name.
func (p *Policy) Name() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.spec.Name
}

// Action is the policy's configured action.
func (p *Policy) Action() Action {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.spec.Action
}

// Lists are the policy's block list files, in configured order: the
// bounded set of list labels for metrics.
func (p *Policy) Lists() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.spec.Block)
}

// Reload reads the policy's lists again when they changed and swaps the
// new Set in; it reports whether it did. A file whose size and
// modification time are as last compiled is taken as unchanged, unless
// force (SIGHUP): then every file is read, and compiled again when any
// one's contents differ. On an error (a list that cannot be read) the
// policy keeps the lists it had.
func (p *Policy) Reload(force bool) (bool, error) {
	p.mu.Lock()
	spec := p.spec
	p.mu.Unlock()
	return p.load(spec, force)
}

// update makes spec the policy's (the configuration changed): its lists
// are compiled again at once. On an error the policy keeps its old spec
// and lists.
func (p *Policy) update(spec Spec) error {
	_, err := p.load(spec, true)
	return err
}

// load compiles spec when its files changed (or spec is not the one
// compiled), and swaps the new Set in.
func (p *Policy) load(spec Spec, force bool) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	files := p.opt.files()
	same := p.stamps != nil && sameSpec(spec, p.spec)
	if same && !force {
		unchanged := true
		for name, st := range p.stamps {
			fi, err := files.Stat(name)
			if err != nil {
				return false, errors.Join(errors.New("policy "+spec.Name+": lists kept"), err)
			}
			if fi.Size() != st.size || !fi.ModTime().Equal(st.mod) {
				unchanged = false
				break
			}
		}
		if unchanged {
			return false, nil
		}
	}
	data, err := readLists(spec, files)
	if err != nil {
		if p.stamps != nil {
			err = errors.Join(errors.New("policy "+spec.Name+": lists kept"), err)
		}
		return false, err
	}
	stamps := make(map[string]stamp, len(data))
	changed := !same
	for name, b := range data {
		st := stamp{size: int64(len(b)), sum: maphash.Bytes(sumSeed, b)}
		if fi, err := files.Stat(name); err == nil {
			st.mod = fi.ModTime()
		}
		if old, ok := p.stamps[name]; !ok || old.sum != st.sum {
			changed = true
		}
		stamps[name] = st
	}
	p.stamps = stamps
	if !changed {
		return false, nil
	}
	p.set.Store(compileData(spec, data, p.opt))
	p.spec = spec
	return true, nil
}

func sameSpec(a, b Spec) bool {
	return a.Name == b.Name && a.Action == b.Action && slices.Equal(a.Block, b.Block) && slices.Equal(a.Allow, b.Allow)
}
