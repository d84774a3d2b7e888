// Package workpool runs jobs on goroutines that stay for the next job.
//
// A goroutine started per job begins with a small stack and grows it by
// copying, several times, on its way down to a socket read (natively 7 %
// of a forwarded question's CPU; in the WebAssembly module about half of
// a request's time, both profiled); a kept goroutine has grown already.
// A job goes to a goroutine that waits for one or, when none waits, to a
// new one: a job never queues behind another.
//
// Kept goroutines that a load no longer needs end: every trimInterval
// the pool counts those waiting, and at the close of each window of
// trimSamples counts the fewest it saw waiting (goroutines no job needed
// all window long) end. So a process comes back to rest within two
// windows (4 s) of its last job, a flood's goroutines included, and no
// timer runs while no goroutine lives.
package workpool

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// trimInterval is how often the pool counts its waiting goroutines.
	trimInterval = 500 * time.Millisecond
	// trimSamples is the counts of one window: 2 s.
	trimSamples = 4
)

// Pool runs jobs of type J with do. J is a value, not a closure, so
// handing a job over allocates nothing.
type Pool[J any] struct {
	do      func(J)
	jobs    chan J        // unbuffered: a send succeeds only when a goroutine waits
	quit    chan struct{} // closed by Stop: waiting goroutines end
	maxIdle int32
	idle    atomic.Int32 // goroutines waiting, or about to
	started atomic.Int64 // goroutines started, ever
	live    atomic.Int32 // goroutines running or waiting
	// shrink ends one waiting goroutine per send: unbuffered, so a send
	// succeeds only when one waits.
	shrink chan struct{}
	trim   trimmer
}

// trimmer is the count of the waiting goroutines over one window.
type trimmer struct {
	mu      sync.Mutex
	timer   *time.Timer // nil while no goroutine lives
	fewest  int32
	samples int
}

// New returns a pool that keeps at most maxIdle goroutines waiting.
func New[J any](maxIdle int, do func(J)) *Pool[J] {
	return &Pool[J]{do: do, jobs: make(chan J), quit: make(chan struct{}), maxIdle: int32(maxIdle),
		shrink: make(chan struct{}), trim: trimmer{fewest: math.MaxInt32}}
}

// Run runs j on a waiting goroutine, or on a new one.
func (p *Pool[J]) Run(j J) {
	select {
	case p.jobs <- j:
	default:
		p.started.Add(1)
		p.live.Add(1)
		p.armTrim()
		go p.work(j)
	}
}

// armTrim starts the counts, unless they run.
func (p *Pool[J]) armTrim() {
	t := &p.trim
	t.mu.Lock()
	if t.timer == nil {
		t.timer = time.AfterFunc(trimInterval, p.sample)
	}
	t.mu.Unlock()
}

// sample counts the waiting goroutines; at a window's close it ends the
// fewest counted in it. It runs again while any goroutine lives.
func (p *Pool[J]) sample() {
	t := &p.trim
	t.mu.Lock()
	t.fewest = min(t.fewest, p.idle.Load())
	t.samples++
	end := int32(0)
	if t.samples == trimSamples {
		end, t.fewest, t.samples = t.fewest, math.MaxInt32, 0
	}
	t.mu.Unlock()
	for range end {
		select {
		case p.shrink <- struct{}{}:
		default: // none waits now: busy again, or ending
		}
	}
	t.mu.Lock()
	if p.live.Load() > 0 {
		t.timer.Reset(trimInterval)
	} else {
		t.timer, t.fewest, t.samples = nil, math.MaxInt32, 0
	}
	t.mu.Unlock()
}

// work runs j, then waits for the next job while the pool runs and no
// more than maxIdle others wait.
func (p *Pool[J]) work(j J) {
	var zero J
	defer p.live.Add(-1)
	for {
		p.do(j)
		j = zero // nothing of the last job stays reachable while waiting
		if p.idle.Add(1) > p.maxIdle {
			p.idle.Add(-1)
			return
		}
		select {
		case j = <-p.jobs:
			p.idle.Add(-1)
		case <-p.quit:
			p.idle.Add(-1)
			return
		case <-p.shrink:
			p.idle.Add(-1)
			return
		}
	}
}

// Stop lets the waiting goroutines end; busy ones end after their job.
// Run still works after Stop, on new goroutines that do not stay.
func (p *Pool[J]) Stop() {
	select {
	case <-p.quit:
	default:
		close(p.quit)
	}
}

// Idle is the goroutines waiting for a job.
func (p *Pool[J]) Idle() int { return int(p.idle.Load()) }

// Live is the goroutines running a job or waiting for one.
func (p *Pool[J]) Live() int { return int(p.live.Load()) }

// Started is the goroutines the pool has started, ever.
func (p *Pool[J]) Started() int64 { return p.started.Load() }
