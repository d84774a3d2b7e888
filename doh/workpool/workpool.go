// Package workpool runs jobs on goroutines that stay for the next job.
//
// A goroutine started per job begins with a small stack and grows it by
// copying, several times, on its way down to a socket read (natively 7 %
// of a forwarded question's CPU; in the WebAssembly module about half of
// a request's time, both profiled); a kept goroutine has grown already.
// A job goes to a goroutine that waits for one or, when none waits, to a
// new one: a job never queues behind another. A goroutine waits at most
// IdleTime for its next job: a burst (a flood of requests reset at once)
// leaves no goroutines behind once it is over.
package workpool

import (
	"sync/atomic"
	"time"
)

// IdleTime is how long a kept goroutine waits for its next job before it
// ends. A busy server hands it one well within that.
const IdleTime = time.Second

// Pool runs jobs of type J with do. J is a value, not a closure, so
// handing a job over allocates nothing.
type Pool[J any] struct {
	do      func(J)
	jobs    chan J        // unbuffered: a send succeeds only when a goroutine waits
	quit    chan struct{} // closed by Stop: waiting goroutines end
	maxIdle int32
	idle    atomic.Int32 // goroutines waiting, or about to
	started atomic.Int64 // goroutines started, ever
}

// New returns a pool that keeps at most maxIdle goroutines waiting.
func New[J any](maxIdle int, do func(J)) *Pool[J] {
	return &Pool[J]{do: do, jobs: make(chan J), quit: make(chan struct{}), maxIdle: int32(maxIdle)}
}

// Run runs j on a waiting goroutine, or on a new one.
func (p *Pool[J]) Run(j J) {
	select {
	case p.jobs <- j:
	default:
		p.started.Add(1)
		go p.work(j)
	}
}

// work runs j, then waits for the next job, at most IdleTime, while the
// pool runs and no more than maxIdle others wait.
func (p *Pool[J]) work(j J) {
	var zero J
	var idle *time.Timer // made at the first wait; reset at each
	for {
		p.do(j)
		j = zero // nothing of the last job stays reachable while waiting
		if p.idle.Add(1) > p.maxIdle {
			p.idle.Add(-1)
			return
		}
		if idle == nil {
			idle = time.NewTimer(IdleTime)
		} else {
			idle.Reset(IdleTime)
		}
		select {
		case j = <-p.jobs:
			p.idle.Add(-1)
		case <-p.quit:
			p.idle.Add(-1)
			return
		case <-idle.C:
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

// Started is the goroutines the pool has started, ever.
func (p *Pool[J]) Started() int64 { return p.started.Load() }
