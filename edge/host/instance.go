package host

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"

	"github.com/dohfwd/dohfwd/doh/config"
	"github.com/dohfwd/dohfwd/doh/workpool"
	"github.com/dohfwd/dohfwd/edge/abi"
	"github.com/dohfwd/dohfwd/engine"
)

// Instance is one instantiated module with its engine, answering any
// number of requests at once. Whoever brings an event (a request, a
// cancel, a socket's result, the module's deadline passing) calls
// dohfwd_poll with every event pending, unless a call is under way: then
// that call's goroutine takes the new events too before it lets go. So a
// request's own goroutine usually runs its poll, no goroutine is woken
// just to call the module, and under load the events come in batches.
// Serve, Status and Reload are safe for concurrent use.
type Instance struct {
	mod                          api.Module
	memory                       linearMemory
	buffer, poll, status, reload api.Function
	network                      engine.Network
	readers                      *workpool.Pool[readJob] // kept goroutines for the sockets' reads
	pollCtx                      context.Context         // names the instance to the imports
	inFlight                     atomic.Int64            // requests in progress
	receiving                    atomic.Int32            // reads the host waits on, for tests
	askedNow                     atomic.Uint64           // questions dohfwd_ask answered, for tests
	askCalls                     atomic.Uint64           // calls of dohfwd_ask, for tests
	polls                        atomic.Uint64           // calls of dohfwd_poll, for tests
	timerFires                   atomic.Uint64           // onTimer calls (each may cost a poll), for tests
	askMisses                    atomic.Uint32           // dohfwd_ask calls in a row that answered nothing (askNow)
	askSkips                     atomic.Uint32           // questions askNow let by while askMisses ran high
	asking                       atomic.Bool             // a dohfwd_ask holds calling (askNow, start)
	due                          atomic.Bool             // the timer fired: a poll is owed, events or not
	cannotStart                  atomic.Bool             // the module does not begin questions in dohfwd_ask (start)
	begun                        atomic.Uint64           // questions start began at once (startNow), for tests
	begunQueued                  atomic.Uint64           // questions start queued for a poll (startQueued), for tests
	pollQueued                   atomic.Bool             // a goroutine is on its way to poll for startQueued
	finishedInPlace              atomic.Uint64           // begun questions finished where their poll ran (unlock), for tests
	finishedOnWorker             atomic.Uint64           // begun questions a reader's poll answered, finished on a worker (unlock), for tests

	// calling is held by the goroutine calling into the module; under it:
	calling  sync.Mutex
	stack    [2]uint64    // parameters and results of the per-poll calls (call)
	bufAt    uint32       // the module's buffer: its address (abi.ExportBuffer) ...
	bufSize  uint32       // ... and how many bytes it is known to hold there
	timer    *time.Timer  // polls at the module's deadline ...
	timerAt  time.Time    // ... which is then
	answers  []abi.Answer // reused
	ask      api.Function // optional (abi.ExportAsk): nil when the module lacks it
	askIn    []byte       // the question dohfwd_ask is given
	eventsIn []byte       // the events of the poll under way
	closed   bool
	// The begun questions (start) the polls answered, to finish once
	// the instance is let go (unlock), in order; linked by call.next.
	finishedFirst, finishedLast *call

	mu      sync.Mutex
	events  []byte           // encoded events for the next poll
	calls   map[uint32]*call // requests in progress by ID
	nextID  uint32
	sockets map[uint32]*socket // open sockets by fd
	nextFD  uint32
	failed  error // the module trapped or the instance was closed

	hits *hotEntries // takes the module's hit records (abi.InitPublishHotEntries); nil: none
}

// call is one request or question waiting for its answer. Pooled: a
// question costs the host no allocation of its own but its strings.
type call struct {
	done chan struct{} // a value once answered (or failed: err)
	err  error
	// A request (EventRequest): out is the encoded abi.Response, a copy.
	out []byte
	// A question (EventQuery): resp is the engine's answer, its Wire
	// appended to dst.
	question bool
	dst      []byte
	resp     engine.Response

	// A question begun on the front end's reader (Pool.StartMiss, start)
	// has no goroutine waiting on done: then finishes it once its answer
	// (resp, its reply in wire; or err) is in (answered).
	then     engine.MissContinuation
	id       uint32
	in       *Instance
	query    []byte // the front end's query, until it is begun
	asked    bool   // dohfwd_ask could not answer it at once already
	answered bool
	wire     []byte // the answer's reply, copied out of the module (its buffer kept)
	// watcher or stopWatch watch the question's context (watch).
	watcher   engine.CancelWatcher
	stopWatch func() bool
	kept      bool  // out of the pool for good: a cancel may still Close it
	next      *call // in the instance's list of begun questions answered
}

var calls = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

func getCall() *call { return calls.Get().(*call) }

// putCall returns c to the pool; only a call with no answer on its way
// (answered and read, or taken from the map before any answer came). A
// kept call (a cancel raced its delivery) never goes back: a late Close
// must not cancel the call's next question.
func putCall(c *call) {
	if c.kept {
		return
	}
	wire := c.wire[:0]
	if cap(wire) > maxKeptWire {
		wire = nil // a big answer's buffer is left to the collector
	}
	*c = call{done: c.done, wire: wire}
	calls.Put(c)
}

// maxKeptWire bounds the answer buffer a pooled call keeps.
const maxKeptWire = 4096

// errClosed is what a call into a closed instance returns.
var errClosed = errors.New("edge: instance closed")

// NewInstance instantiates the module, configures it with configYAML (the
// same YAML as the server's, handed to the module encoded: see
// abi.ExportInit) and runs its first poll.
func (r *Runtime) NewInstance(ctx context.Context, configYAML []byte) (*Instance, error) {
	encoded, err := encodeYAML(configYAML)
	if err != nil {
		return nil, err
	}
	return r.newInstance(ctx, encoded, nil)
}

// encodeYAML reads and checks configYAML and encodes it for the module.
func encodeYAML(configYAML []byte) ([]byte, error) {
	cfg, err := config.Parse("edge config", configYAML)
	if err != nil {
		return nil, err
	}
	return config.Encode(cfg)
}

// newInstance is NewInstance with the configuration encoded already
// (config.Encode), its module's hit records going to hits when not nil.
func (r *Runtime) newInstance(ctx context.Context, encoded []byte, hits *hotEntries) (*Instance, error) {
	mc := wazero.NewModuleConfig().
		WithName(""). // anonymous, so there may be many
		WithStartFunctions("_initialize").
		WithSysWalltime().WithSysNanotime().WithSysNanosleep().
		WithRandSource(rand.Reader).
		WithStderr(r.opts.Stderr).WithStdout(r.opts.Stderr)
	in := &Instance{
		network: r.opts.Network,
		calls:   map[uint32]*call{},
		sockets: map[uint32]*socket{},
		hits:    hits,
	}
	in.readers = workpool.New(maxIdleReaders, in.readOnce)
	in.pollCtx = withInstance(context.Background(), in)
	ctx = withInstance(ctx, in)
	// The instance's memory is reserved address space that grows in place
	// (memory_unix.go), not wazero's slice that grows by copying.
	alloc := experimental.MemoryAllocatorFunc(func(_, max uint64) experimental.LinearMemory {
		in.memory = newLinearMemory(max)
		return in.memory
	})
	mod, err := r.rt.InstantiateModule(experimental.WithMemoryAllocator(ctx, alloc), r.compiled, mc)
	if err != nil {
		return nil, fmt.Errorf("edge: instantiate: %w", err)
	}
	if in.memory == nil {
		mod.Close(ctx)
		return nil, errors.New("edge: module has no memory")
	}
	in.mod = mod
	in.buffer = mod.ExportedFunction(abi.ExportBuffer)
	in.poll = mod.ExportedFunction(abi.ExportPoll)
	in.status = mod.ExportedFunction(abi.ExportStatus)
	in.reload = mod.ExportedFunction(abi.ExportReload)
	in.ask = mod.ExportedFunction(abi.ExportAsk)
	initFn := mod.ExportedFunction(abi.ExportInit)
	if in.buffer == nil || in.poll == nil || in.status == nil || in.reload == nil || initFn == nil {
		mod.Close(ctx)
		return nil, errors.New("edge: module lacks the dohfwd exports")
	}
	if err := in.put(ctx, encoded); err != nil {
		mod.Close(ctx)
		return nil, err
	}
	var flags uint64
	if r.opts.TCPOnly {
		flags |= abi.InitTCPOnly
	}
	if hits != nil {
		flags |= abi.InitPublishHotEntries
	}
	res, err := initFn.Call(ctx, uint64(len(encoded)), flags)
	if err != nil {
		mod.Close(ctx)
		return nil, fmt.Errorf("edge: init: %w", err)
	}
	if n := uint32(res[0]); n != 0 {
		msg, _ := in.result(ctx, n)
		mod.Close(ctx)
		return nil, fmt.Errorf("edge: module config: %s", msg)
	}
	in.timer = time.AfterFunc(time.Hour, in.onTimer)
	in.due.Store(true) // the first poll: no event, but its deadline
	in.kick()
	return in, nil
}

// hostBufferSize is the size of the module's buffer the host asks for
// at the start: the inputs and outputs of a poll and an ask fit in it, so
// they need no dohfwd_buffer call (see the abi package's exports).
const hostBufferSize = 64 << 10

// put writes b into the module's buffer. The buffer moves only when it
// grows (abi.ExportBuffer), so an input within the size known at its
// address goes there without asking the module.
func (in *Instance) put(ctx context.Context, b []byte) error {
	if uint32(len(b)) > in.bufSize {
		at, err := in.call(ctx, in.buffer, uint64(max(len(b), hostBufferSize)))
		if err != nil {
			return fmt.Errorf("edge: buffer: %w", err)
		}
		in.bufAt, in.bufSize = uint32(at), uint32(max(len(b), hostBufferSize))
	}
	if !in.mod.Memory().Write(in.bufAt, b) {
		return errors.New("edge: buffer out of range")
	}
	return nil
}

// call calls f, an export of at most two parameters and one result, with
// params, and returns its result: Call would allocate the stack for each
// of the three calls a poll makes. The caller holds in.calling (or owns
// the instance still being made).
func (in *Instance) call(ctx context.Context, f api.Function, params ...uint64) (uint64, error) {
	stack := in.stack[:]
	copy(stack, params)
	if err := f.CallWithStack(ctx, stack); err != nil {
		return 0, err
	}
	return stack[0], nil
}

// view returns the n bytes of the last result, in the module's memory:
// valid until the next call. A result within the size known at the
// buffer's address is there (it did not grow the buffer); a longer one
// may have moved it.
func (in *Instance) view(ctx context.Context, n uint32) ([]byte, error) {
	if n > in.bufSize {
		at, err := in.call(ctx, in.buffer, 0)
		if err != nil {
			return nil, fmt.Errorf("edge: buffer: %w", err)
		}
		in.bufAt, in.bufSize = uint32(at), n // it holds the result there
	}
	b, ok := in.mod.Memory().Read(in.bufAt, n)
	if !ok {
		return nil, errors.New("edge: result out of range")
	}
	return b, nil
}

// result copies the n bytes of the last result out of the module.
func (in *Instance) result(ctx context.Context, n uint32) ([]byte, error) {
	b, err := in.view(ctx, n)
	return append([]byte(nil), b...), err
}

// event queues e for the next poll and sees that one runs.
func (in *Instance) event(e *abi.Event) {
	in.queue(e)
	in.kick()
}

// queue queues e (its data copied) for the next poll.
func (in *Instance) queue(e *abi.Event) {
	in.mu.Lock()
	in.events = abi.AppendEvent(in.events, e)
	in.mu.Unlock()
}

// pending reports whether events wait for a poll.
func (in *Instance) pending() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.events) > 0
}

// kick polls the module until no event is pending, unless another
// goroutine is calling it: that one polls again for what came meanwhile.
//
// It yields first, so that the goroutines already runnable (other
// requests' workers, socket waiters woken by the same readiness) queue
// their events for this poll rather than each polling for its own: a
// call into the module cannot be preempted, so with one P (GOMAXPROCS=1)
// nothing else ran while a poll did, and every poll carried one event.
// Measured on the distinct-names load at GOMAXPROCS=1: 1.8 polls per
// question and 1 event per poll before, 0.22 and 7 with the yield, at
// 0.6-0.8x the CPU per request. A yield with nothing else runnable is
// about 0.1 µs; a poll, tens.
//
// The questions begun on a reader (start) that its polls answer are
// finished here, in place (unlock): kick must not run on a goroutine
// that holds an HTTP/2 connection's lock (kickIfPending(finishOnWorker)
// is the readers').
func (in *Instance) kick() { in.kickOn(finishOnCaller) }

// kickOn is kick, finishing the begun questions its polls answer at at
// (see unlock).
func (in *Instance) kickOn(at finishAt) {
	runtime.Gosched()
	if !in.pending() && !in.due.Load() {
		return // another goroutine's poll took the events
	}
	for in.calling.TryLock() {
		if in.closed {
			in.calling.Unlock()
			return
		}
		err := in.pollLocked()
		in.unlock(at)
		if err != nil {
			in.fail(err)
			return
		}
		// An event queued after the check above found the lock held.
		if !in.pending() {
			return
		}
	}
}

// pollLocked polls until no event is pending. The caller holds
// in.calling; after an error the instance is closed, and the caller fails
// it once it lets go.
func (in *Instance) pollLocked() error {
	for {
		next, err := in.pollOnce(in.pollCtx)
		if err != nil {
			in.closed = true
			return err
		}
		if !in.pending() {
			in.timerAt = next
			in.timer.Reset(max(time.Until(next), 0))
			return nil
		}
	}
}

// onTimer polls at the module's deadline. When a call holds the instance,
// a poll's end resets the timer, but a dohfwd_ask's does not: due tells
// it a poll is owed.
func (in *Instance) onTimer() {
	in.timerFires.Add(1)
	in.due.Store(true)
	in.kick()
}

// pollOnce hands the pending events to the module and the finished
// answers to their requests, and returns when to call again. The caller
// holds in.calling.
func (in *Instance) pollOnce(ctx context.Context) (time.Time, error) {
	in.due.Store(false) // this poll reads the clock after it
	in.mu.Lock()
	in.eventsIn, in.events = in.events, in.eventsIn[:0]
	in.mu.Unlock()
	if !in.memory.enter() {
		return time.Time{}, errClosed
	}
	defer in.memory.leave()
	if err := in.put(ctx, in.eventsIn); err != nil {
		return time.Time{}, err
	}
	in.polls.Add(1)
	n, err := in.call(ctx, in.poll, api.EncodeI64(time.Now().UnixNano()), uint64(len(in.eventsIn)))
	if err != nil {
		return time.Time{}, fmt.Errorf("edge: poll: %w", err)
	}
	out, err := in.view(ctx, uint32(n))
	if err != nil {
		return time.Time{}, err
	}
	deadline, answers, err := abi.ParsePollResult(out, in.answers[:0])
	in.answers = answers
	if err != nil {
		return time.Time{}, fmt.Errorf("edge: poll result: %w", err)
	}
	var now time.Time // read once for the answers of this poll
	for _, a := range answers {
		if a.ID == abi.PublishedID && in.hits != nil {
			in.hits.take(a.Response)
			continue
		}
		in.mu.Lock()
		c := in.calls[a.ID]
		delete(in.calls, a.ID)
		in.mu.Unlock()
		if c == nil {
			continue // cancelled: no one waits
		}
		if c.then != nil {
			if now.IsZero() {
				now = time.Now()
			}
			in.deliverBegun(c, a.Response, now)
			continue
		}
		if !c.question {
			c.out = append([]byte(nil), a.Response...)
		} else if c.resp, c.err = abi.ParseQueryAnswer(a.Response); c.err == nil {
			// The front end's duration ends here, with the host's clock.
			if now.IsZero() {
				now = time.Now()
			}
			c.resp.Wire = append(c.dst, c.resp.Wire...)
			c.resp.Answered = now
		}
		c.done <- struct{}{}
	}
	return time.Unix(0, deadline), nil
}

// fail ends every request in progress with err and closes the sockets;
// the instance takes no more calls.
func (in *Instance) fail(err error) {
	in.mu.Lock()
	if in.failed == nil {
		in.failed = err
	}
	err = in.failed
	calls := in.calls
	in.calls = map[uint32]*call{}
	socks := in.sockets
	in.sockets = map[uint32]*socket{}
	in.mu.Unlock()
	for _, c := range calls {
		c.err = err
		if c.then != nil { // begun: no one waits on done
			in.inFlight.Add(-1)
			c.unwatch()
			c.answered = true
			c.then.ResolveElsewhere()
			continue
		}
		c.done <- struct{}{}
	}
	for _, s := range socks {
		s.close()
	}
}

// Serve hands one encoded abi.Request to the module and returns the
// encoded abi.Response. When ctx ends first (the client went away) the
// module is told, and its engine ends the question as the native one
// does: cancelled, not charged to the server.
func (in *Instance) Serve(ctx context.Context, req []byte) ([]byte, error) {
	c := getCall()
	err := in.roundTrip(ctx, c, func(b []byte, id uint32) []byte {
		return abi.AppendEvent(b, &abi.Event{Kind: abi.EventRequest, ID: id, Data: req})
	})
	if err != nil {
		return nil, err
	}
	out, err := c.out, c.err
	putCall(c)
	return out, err
}

// Resolve hands one DNS question to the module's engine (abi.EventQuery)
// and returns its answer, the reply appended to dst. Cancelled as Serve.
// An answer the engine has in memory comes at once from dohfwd_ask when
// the instance is free; any other goes by dohfwd_poll.
func (in *Instance) Resolve(ctx context.Context, q *abi.Query, dst []byte) (engine.Response, error) {
	return in.resolve(ctx, q, dst, true)
}

// resolve is Resolve, by a poll alone unless ask.
func (in *Instance) resolve(ctx context.Context, q *abi.Query, dst []byte, ask bool) (engine.Response, error) {
	if ask {
		if resp, _, ok, err := in.askNow(q, dst, false); ok || err != nil {
			return resp, err
		}
	}
	c := getCall()
	c.question, c.dst = true, dst
	err := in.roundTrip(ctx, c, func(b []byte, id uint32) []byte { return abi.AppendQueryEvent(b, id, q) })
	if err != nil {
		return engine.Response{}, err
	}
	resp, err := c.resp, c.err
	putCall(c)
	return resp, err
}

// askNow asks the module for q's answer at once (abi.ExportAsk), when no
// call into the module is under way and no event waits for a poll. It
// reports ok false when the question must go by a poll: the instance was
// busy or closed or its module lacks the export (asked false), or the
// module could not answer from memory (asked true; it then started
// nothing). err is the module's failure (a trap): the instance is closed.
// Events that came during the call are polled for before it returns, as
// kick would.
//
// After askMissRun asks in a row that answered nothing (a cache that is
// off, names all new), only one question in askMissProbe is asked (and
// none with wait, on the front end's connection goroutine), until one is
// answered: a question not asked is answered by its poll all the same,
// at once if it can be, and an ask that answers nothing costs a call
// into the module that the poll repeats.
//
// With wait, a call that finds another dohfwd_ask under way waits for it
// (a few microseconds) instead of reporting false, and polls for the
// events pending then before its own ask: the DoH front end's
// connection goroutine asks so (Pool.AnswerNow), since a
// question it does not answer at once costs a goroutine, a wake-up, a
// poll and a reply written on its own. A poll under way is not waited
// for.
func (in *Instance) askNow(q *abi.Query, dst []byte, wait bool) (resp engine.Response, asked, ok bool, err error) {
	if in.askMisses.Load() >= askMissRun && (wait || in.askSkips.Add(1)%askMissProbe != 0) {
		return resp, false, false, nil
	}
	if !wait && in.pending() {
		// The question will be queued behind these events and polled
		// with them (resolve): taking the instance now only to let go
		// would poll them first, one question at a time (see kick).
		return resp, false, false, nil
	}
	if !in.calling.TryLock() {
		if !wait || !in.asking.Load() {
			return resp, false, false, nil
		}
		in.calling.Lock()
	}
	at := finishOnCaller // on a worker (resolve)
	if wait {
		at = finishOnWorker // on an HTTP/2 reader
	}
	if wait && !in.closed && (in.pending() || in.due.Load()) {
		if err := in.pollLocked(); err != nil {
			in.unlock(at)
			in.fail(err)
			return resp, false, false, err
		}
	}
	if in.ask == nil || in.closed || in.pending() || !in.memory.enter() {
		in.unlock(at)
		in.kickIfPending(at)
		return resp, false, false, nil
	}
	in.inFlight.Add(1)
	in.asking.Store(true)
	resp, ok, err = in.askLocked(q, dst)
	in.asking.Store(false)
	in.inFlight.Add(-1)
	in.memory.leave()
	if ok {
		in.askMisses.Store(0)
	} else {
		in.askMisses.Add(1)
	}
	if err != nil {
		in.closed = true
		in.unlock(at)
		in.fail(err)
		return resp, true, false, err
	}
	in.unlock(at)
	in.kickIfPending(at)
	return resp, true, ok, nil
}

// askNow's run of unanswered asks after which it asks only one question
// in askMissProbe.
const (
	askMissRun   = 8
	askMissProbe = 8
)

// askLocked is askNow's call; the caller holds in.calling and the memory.
func (in *Instance) askLocked(q *abi.Query, dst []byte) (engine.Response, bool, error) {
	ctx := in.pollCtx
	in.askIn = abi.AppendQueryEvent(in.askIn[:0], 0, q)
	if err := in.put(ctx, in.askIn); err != nil {
		return engine.Response{}, false, err
	}
	in.askCalls.Add(1)
	n, err := in.call(ctx, in.ask, uint64(len(in.askIn)))
	if err != nil {
		return engine.Response{}, false, fmt.Errorf("edge: ask: %w", err)
	}
	if uint32(n) == 0 {
		return engine.Response{}, false, nil
	}
	out, err := in.view(ctx, uint32(n))
	if err != nil {
		return engine.Response{}, false, err
	}
	if abi.Published(out) {
		in.due.Store(true) // hit records wait: askNow polls for them
	}
	resp, err := abi.ParseQueryAnswer(out)
	if err != nil {
		return resp, false, fmt.Errorf("edge: ask result: %w", err)
	}
	// As a poll's answer: the reply copied out, the host's clock.
	resp.Wire = append(dst, resp.Wire...)
	resp.Answered = time.Now()
	in.askedNow.Add(1)
	return resp, true, nil
}

// kickIfPending polls for events queued (or the deadline passed) while
// the caller held in.calling: their kick found it held and left them to
// it, finishing the begun questions at at (see unlock).
func (in *Instance) kickIfPending(at finishAt) {
	if in.pending() || in.due.Load() {
		in.kickOn(at)
	}
}

// roundTrip queues the event that appendEvent writes, numbered for c,
// and waits for c's answer (or the instance's failure, in c.err) or
// ctx's end. Unless it returns an error, c is the caller's to read and
// put back.
func (in *Instance) roundTrip(ctx context.Context, c *call, appendEvent func(b []byte, id uint32) []byte) error {
	in.mu.Lock()
	if in.failed != nil {
		err := in.failed
		in.mu.Unlock()
		putCall(c)
		return err
	}
	id := in.newID()
	in.calls[id] = c
	in.events = appendEvent(in.events, id)
	in.mu.Unlock()
	in.inFlight.Add(1)
	defer in.inFlight.Add(-1)
	in.kick()
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
	}
	in.mu.Lock()
	_, waiting := in.calls[id]
	delete(in.calls, id)
	in.mu.Unlock()
	if !waiting {
		// A poll took the answer already and is handing it over (into
		// dst, which is the caller's again once this returns): wait
		// for it, then let it go.
		<-c.done
	}
	putCall(c)
	in.event(&abi.Event{Kind: abi.EventCancel, ID: id})
	return ctx.Err()
}

// newID numbers a request or question; the caller holds in.mu. It skips
// abi.PublishedID when the numbering wraps: that ID carries hit records.
func (in *Instance) newID() uint32 {
	in.nextID++
	if in.nextID == abi.PublishedID {
		in.nextID++
	}
	return in.nextID
}

func (in *Instance) err() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.failed
}

// do runs f between two polls.
func (in *Instance) do(ctx context.Context, f func(ctx context.Context) error) error {
	in.calling.Lock()
	defer in.kick()          // events that came while f ran ...
	defer in.due.Store(true) // ... and a poll for f's changes (a reload's)
	defer in.calling.Unlock()
	if in.closed || !in.memory.enter() {
		return cmpErr(in.err(), errClosed)
	}
	defer in.memory.leave()
	return f(withInstance(ctx, in))
}

func cmpErr(err, otherwise error) error {
	if err != nil {
		return err
	}
	return otherwise
}

// Status returns the instance's engine status as JSON.
func (in *Instance) Status(ctx context.Context) ([]byte, error) {
	var out []byte
	err := in.do(ctx, func(ctx context.Context) error {
		res, err := in.status.Call(ctx)
		if err != nil {
			return fmt.Errorf("edge: status: %w", err)
		}
		out, err = in.result(ctx, uint32(res[0]))
		return err
	})
	return out, err
}

// Reload hands the instance a reloaded configuration, encoded as for
// dohfwd_init (abi.ExportReload): its engine, log level and limits take
// it, or, when its engine refuses it, nothing changes and the error says
// why.
//
// took, when not nil, runs once the module has taken the configuration,
// before the instance is let go: no poll or ask has run under it yet.
func (in *Instance) Reload(ctx context.Context, encoded []byte, took func()) error {
	return in.do(ctx, func(ctx context.Context) error {
		if err := in.put(ctx, encoded); err != nil {
			return err
		}
		res, err := in.reload.Call(ctx, uint64(len(encoded)))
		if err != nil {
			return fmt.Errorf("edge: reload: %w", err)
		}
		if n := uint32(res[0]); n != 0 {
			msg, _ := in.result(ctx, n)
			return fmt.Errorf("edge: reload: %s", msg)
		}
		if took != nil {
			took()
		}
		return nil
	})
}

// InFlight is the number of requests the instance is answering.
func (in *Instance) InFlight() int64 { return in.inFlight.Load() }

// Close ends the instance: requests in progress fail, its sockets close.
func (in *Instance) Close(ctx context.Context) error {
	in.calling.Lock()
	in.closed = true
	in.timer.Stop()
	in.calling.Unlock()
	in.fail(errClosed)
	in.readers.Stop()
	return in.mod.Close(ctx)
}
