//go:build !wasip1

package doh

import (
	"context"
	"sync/atomic"
)

// workers are the goroutines of a server that resolve questions that wait
// on the network. A worker stays after its question and takes the next
// one: a goroutine started per question begins with a small stack and
// grows it by copying, several times, on the way into the engine (about
// 7 % of the CPU of a forwarded question, profiled); a worker grows it
// once. A question goes to a worker that waits for one, or, when none
// waits, to a new worker: a question never queues behind another.
type workers struct {
	jobs    chan job      // unbuffered: a send succeeds only when a worker waits
	idle    atomic.Int32  // workers waiting, or about to
	maxIdle int32         // more than this many idle workers end
	quit    chan struct{} // closed when the server stops: idle workers end
	started atomic.Int64  // workers started, ever
}

// job is one stream to resolve on its connection.
type job struct {
	c   *h2conn
	ctx context.Context
	st  *stream
}

func newWorkers(maxIdle int32) *workers {
	return &workers{jobs: make(chan job), maxIdle: maxIdle, quit: make(chan struct{})}
}

// run resolves j on a worker that waits, or on a new one.
func (w *workers) run(j job) {
	select {
	case w.jobs <- j:
	default:
		w.started.Add(1)
		go w.work(j)
	}
}

// work resolves j, then waits for the next job while the server runs and
// no more than maxIdle others wait.
func (w *workers) work(j job) {
	for {
		j.c.resolve(j.ctx, j.st)
		j = job{}
		if w.idle.Add(1) > w.maxIdle {
			w.idle.Add(-1)
			return
		}
		select {
		case j = <-w.jobs:
			w.idle.Add(-1)
		case <-w.quit:
			w.idle.Add(-1)
			return
		}
	}
}

// stop lets the idle workers end; busy ones end after their question.
func (w *workers) stop() {
	select {
	case <-w.quit:
	default:
		close(w.quit)
	}
}
