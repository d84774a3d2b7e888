//go:build wasip1

package main

import (
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dohfwd/dohfwd/edge/abi"
	"github.com/dohfwd/dohfwd/engine"
)

// requests is the requests and questions in progress: their contexts by
// the host's ID, and the answers finished since the last poll.
var requests = struct {
	sync.Mutex
	cancel  map[uint32]*engine.CancelContext
	answers []byte // abi.AppendAnswer records
	scratch []byte // a response's encoding, copied into answers
	// published is the hit records (abi.AppendHitRecord) for the
	// next poll result (abi.InitPublishHotEntries).
	published []byte
}{cancel: map[uint32]*engine.CancelContext{}}

// Until the host calls again, only the goroutines' timers that are not a
// socket's deadline (a coalesced question's budget, the probe ticker)
// would go unnoticed; the deadline a poll returns is never later than
// this, so they fire at most this late.
const (
	busyPollGap = 100 * time.Millisecond // requests or socket waits in progress
	idlePollGap = time.Second            // nothing in progress: the probes' tick
)

// maxRounds bounds one dohfwd_poll's run of the scheduler; a module still
// busy after it asks to be called again at once (deadline now).
const maxRounds = 10000

//go:wasmexport dohfwd_poll
func exportPoll(now int64, n uint32) uint32 {
	in := buf[:n]
	for len(in) > 0 {
		e, rest, err := abi.ParseEvent(in)
		if err != nil {
			break // a host bug: the rest is lost, as a cut message is
		}
		in = rest
		switch e.Kind {
		case abi.EventQuery:
			ask(&e)
		case abi.EventRequest:
			start(e.ID, e.Data)
		case abi.EventCancel:
			// Under the lock: a question's context is pooled, and is
			// another question's once its own left the map.
			requests.Lock()
			if ctx := requests.cancel[e.ID]; ctx != nil {
				ctx.Cancel()
			}
			requests.Unlock()
		case abi.EventConnected, abi.EventRead:
			network.deliver(&e)
		}
	}
	t := time.Unix(0, now)
	finishWithReplies()
	idle := runUntilIdle(t)
	for network.expire(t) || network.anyEnded() {
		finishWithReplies()
		idle = runUntilIdle(t)
	}

	requests.Lock()
	next := nextPoll(t)
	if !idle {
		next = t
	}
	out := abi.AppendPollHeader(buf[:0], next.UnixNano())
	out = append(out, requests.answers...)
	requests.answers = requests.answers[:0]
	if len(requests.published) > 0 {
		out = abi.AppendAnswer(out, abi.PublishedID, requests.published)
		requests.published = requests.published[:0]
	}
	requests.Unlock()
	buf = out[:cap(out)]
	return uint32(len(out))
}

// nextPoll is when the host must call again, at the latest, at t: the
// earliest socket deadline, and never later than the gap while anything
// is in progress. Under requests' lock.
func nextPoll(t time.Time) time.Time {
	next := network.deadline()
	gap := idlePollGap
	if len(requests.cancel) > 0 || network.busy() {
		gap = busyPollGap
	}
	if next.IsZero() || t.Add(gap).Before(next) {
		next = t.Add(gap)
	}
	return next
}

// start runs one request on a worker goroutine; its answer joins the
// next poll result.
func start(id uint32, data []byte) {
	req, err := abi.ParseRequest(append([]byte(nil), data...))
	ctx := new(engine.CancelContext)
	requests.Lock()
	requests.cancel[id] = ctx
	requests.Unlock()
	workers.Run(job{request: func() {
		var resp abi.Response
		switch {
		case err != nil:
			resp = abi.Response{Status: statusBadRequest, Body: []byte(err.Error())}
		case handler == nil:
			resp = abi.Response{Status: statusServiceUnavailable, Body: []byte("dohfwd_init was not called")}
		default:
			resp = serve(ctx, &req)
		}
		ctx.Cancel()
		requests.Lock()
		delete(requests.cancel, id)
		requests.scratch = abi.AppendResponse(requests.scratch[:0], &resp)
		requests.answers = abi.AppendAnswer(requests.answers, id, requests.scratch)
		requests.Unlock()
	}})
}

// workers runs requests and questions on kept goroutines: a fresh
// goroutine's stack grows by copying on its way down to the engine's
// socket read, in wasm about half the module's time for a request. Not
// doh/workpool: its workers wait in a two-case select (for its Stop),
// which as wasm cost a question more than the engine's own channel waits;
// the module's workers live as long as the instance and wait on one
// channel.
var workers = workerPool{jobs: make(chan job)}

// maxIdleWorkers bounds the goroutines kept waiting for a request.
const maxIdleWorkers = 256

// job is a question to resolve, or else a request to serve: a question
// goes as its pooled state, with no closure made for it.
type job struct {
	qn      *question
	request func()
}

func (j job) run() {
	if j.qn != nil {
		j.qn.resolve()
		return
	}
	j.request()
}

type workerPool struct {
	jobs chan job     // unbuffered: a send succeeds only when a worker waits
	idle atomic.Int32 // workers waiting, or about to
}

// Run hands j to a waiting worker, or starts one.
func (p *workerPool) Run(j job) {
	select {
	case p.jobs <- j:
	default:
		go p.work(j)
	}
}

func (p *workerPool) work(j job) {
	for {
		j.run()
		if p.idle.Add(1) > maxIdleWorkers {
			p.idle.Add(-1)
			return
		}
		parks.Add(1)
		j = <-p.jobs
		p.idle.Add(-1)
	}
}

// parks counts the module's goroutines' parks in its own waits: a
// worker's for its next job, a socket's for its host's event
// (abi.Status.Parked).
var parks atomic.Uint64

// runnable reads the scheduler's count of goroutines ready to run.
var runnable = []metrics.Sample{{Name: "/sched/goroutines/runnable:goroutines"}}

// schedGap is how long a poll with no goroutine ready may go without
// a round of the scheduler (runUntilIdle), whose other work, due timers
// and the GC's workers, then waits at most this long (less than the
// polls' own gap, busyPollGap). A question finished in its poll
// (finishWithReplies) readies no goroutine, and the round, a Gosched and a
// look at the timers, cost about a tenth of such a question (perf).
const schedGap = time.Millisecond

// lastRound is when runUntilIdle last ran the scheduler (the poll's
// clock).
var lastRound time.Time

// runUntilIdle lets every other goroutine run until each waits (on a
// socket, a channel, a timer not yet due), and reports whether that
// happened within maxRounds. runtime.Gosched puts this goroutine at the
// back of the run queue, behind every goroutine that is ready (the
// scheduler runs due timers first); when it runs again with none ready,
// all of them wait. With none ready to begin with it does nothing,
// unless the scheduler's last round was schedGap or more before now.
func runUntilIdle(now time.Time) bool {
	if since := now.Sub(lastRound); since >= 0 && since < schedGap && idleNow() {
		return true // (a clock set back runs the round)
	}
	lastRound = now
	for range maxRounds {
		runtime.Gosched()
		if idleNow() {
			return true
		}
	}
	return false
}

// idleNow reports whether no goroutine is ready to run.
func idleNow() bool {
	metrics.Read(runnable)
	return runnable[0].Value.Kind() == metrics.KindUint64 && runnable[0].Value.Uint64() == 0
}
