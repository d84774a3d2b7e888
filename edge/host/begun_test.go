package host

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/tetratelabs/wazero/api"

	"github.com/dohfwd/dohfwd/edge/abi"
	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
)

// These tests are about the miss begun on the HTTP/2 reader (Pool.StartMiss:
// dohfwd_ask with abi.QueryStart) and finished where the poll of its
// answer runs (started.go), as the native server's miss is begun on the
// reader and finished on the upstream loop.

// One stream, one miss after another, the cache off: each is begun on the
// connection's goroutine in one dohfwd_ask and finished from the poll its
// reply brings, with no goroutine of the host's waiting for it and none
// of the module's (Finished, no worker: Waited 0); each costs one poll.
// That poll runs where the reply is read (the UDP socket's waiter), which
// finishes the stream in place; or, when the reply came while the reader
// still held the instance, on the reader, which hands the stream to the
// front end's worker (it holds its connection's lock).
func TestWazeroMissBegunOnReaderFinishedInPlace(t *testing.T) {
	t.Parallel()
	up := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.30"))
	e := startEdge(t, edgeConfig(up), 1)
	in := e.pool.all[0]
	const n = 24
	polls0, fires0 := in.polls.Load(), in.timerFires.Load()
	for i := range n {
		m, _ := e.get(t, query(fmt.Sprintf("begun%d.example.org", i), dns.TypeA))
		wantAnswer(t, m, "192.0.2.30")
	}
	begun, inPlace, onWorker := e.begun(), e.finishedInPlace(), e.finishedOnWorker()
	if begun != n || inPlace+onWorker != n || inPlace == 0 {
		t.Fatalf("%d misses: %d begun on the reader, %d finished in place, %d on a worker; want all begun and finished so, some in place", n, begun, inPlace, onWorker)
	}
	t.Logf("%d finished in place, %d on a worker", inPlace, onWorker)
	if c := e.queryCounts(t); c != (abi.QueryCounts{Finished: n}) {
		t.Fatalf("module's counts %+v: want all %d finished in the poll of their reply", c, n)
	}
	// The reply's poll; each firing of the module's timer may add one (a
	// loaded machine fires more of them), and a few more may come.
	polls, fires := in.polls.Load()-polls0, in.timerFires.Load()-fires0
	if polls < n || polls > n+fires+n/4 {
		t.Fatalf("%d polls for %d misses (%d timer firings); want one each", polls, n, fires)
	}
	if got := len(up.Queries()); got != n {
		t.Fatalf("upstream read %d queries, want %d", got, n)
	}
	if in.InFlight() != 0 {
		t.Fatalf("%d in flight after the last answer", in.InFlight())
	}
}

// Many questions at once on one HTTP/2 connection, each a distinct name:
// every one answered with its own name, ID and answer. With questions in
// progress the reader queues its misses for one poll (startQueued), whose
// goroutine finishes their answers in place.
func TestWazeroBegunConcurrentStreamsAllAnswered(t *testing.T) {
	t.Parallel()
	up := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.31"))
	e := startEdge(t, edgeConfig(up), 1)
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("c%d.example.org.", i)
			q := query(name, dns.TypeA)
			q.Id = uint16(i + 1)
			wire, _ := q.Pack()
			req, _ := http.NewRequest("GET", e.url+"/dns-query?dns="+base64.RawURLEncoding.EncodeToString(wire), nil)
			req.Header.Set("Accept", "application/dns-message")
			resp, err := e.client.Do(req)
			if err != nil {
				errs <- fmt.Errorf("%s: %v", name, err)
				return
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			m := new(dns.Msg)
			if resp.StatusCode != http.StatusOK || m.Unpack(body) != nil {
				errs <- fmt.Errorf("%s: HTTP %d", name, resp.StatusCode)
				return
			}
			if m.Id != uint16(i+1) || m.Question[0].Name != name || len(m.Answer) != 1 || m.Answer[0].(*dns.A).A.String() != "192.0.2.31" {
				errs <- fmt.Errorf("%s: got %v", name, m)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// One query a question, and one more for each attempt that timed
	// out (a loaded machine may take 2 s for one).
	if got, timeouts := len(up.Queries()), e.status(t).Counters.Attempts["timeout"]; got != n+int(timeouts) {
		t.Errorf("upstream read %d queries for %d questions and %d timeouts", got, n, timeouts)
	}
	begun := e.begun() + e.begunQueued()
	if e.begunQueued() == 0 || e.finishedInPlace() == 0 || e.finishedInPlace()+e.finishedOnWorker() != begun {
		t.Errorf("%d begun on a reader at once, %d queued for a poll, %d finished in place, %d on a worker: want some queued, all finished so, some in place",
			e.begun(), e.begunQueued(), e.finishedInPlace(), e.finishedOnWorker())
	}
	t.Logf("%d of %d begun on the reader at once, %d queued for a poll, %d finished in place, %d on a worker", e.begun(), n, e.begunQueued(), e.finishedInPlace(), e.finishedOnWorker())
	if in := e.pool.all[0]; in.InFlight() != 0 {
		t.Errorf("%d in flight after the last answer", in.InFlight())
	}
}

// A client that goes away cancels its question, for a begun question: its client goes away while the server is
// silent; the module's engine counts the transaction cancelled, not
// charged (clientCancelNotCharged), and the answer that still comes back
// is dropped; the question had been begun on the reader.
func TestWazeroBegunMissCancelNotCharged(t *testing.T) {
	t.Parallel()
	e := clientCancelNotCharged(t, testRuntime(t), upstreamtest.Drop(), nil, 1)
	if e.begun() == 0 {
		t.Fatal("no question was begun on the reader")
	}
}

// trappingPoll is the module's dohfwd_poll once it traps: every call fails
// as a trap in the module's code does (wazero returns the error).
type trappingPoll struct{ api.Function }

func (trappingPoll) CallWithStack(context.Context, []uint64) error {
	return errors.New("wasm error: unreachable (a trap, for the test)")
}

// An instance whose module traps while a begun question waits for its
// reply answers that question SERVFAIL at once, not after a timeout and
// not never; the pool replaces the instance, and the next question is
// answered by the new one.
func TestWazeroInstanceTrapMidBegunMissServfails(t *testing.T) {
	t.Parallel()
	up := upstreamtest.Start(t, func(q upstreamtest.Query) upstreamtest.Action {
		if q.Msg != nil && len(q.Msg.Question) == 1 && strings.EqualFold(q.Msg.Question[0].Name, "silent.example.org.") {
			return upstreamtest.Drop()(q)
		}
		return upstreamtest.Answer("@ 60 IN A 192.0.2.32")(q)
	})
	e := startEdge(t, edgeConfig(up), 1)
	old := e.pool.all[0]
	go func() {
		deadline := time.Now().Add(60 * time.Second)
		for old.begun.Load() == 0 || len(up.Queries()) == 0 {
			if time.Now().After(deadline) {
				t.Errorf("the question was never begun: %d begun, upstream read %d", old.begun.Load(), len(up.Queries()))
				break
			}
			time.Sleep(time.Millisecond)
		}
		old.calling.Lock()
		old.poll = trappingPoll{old.poll}
		old.calling.Unlock()
		old.due.Store(true)
		old.kick()
	}()
	// Bounded, so that an answer lost with the instance fails the test
	// rather than hang it (the silent server's three attempts take 6 s).
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	wire, _ := query("silent.example.org", dns.TypeA).Pack()
	req, _ := http.NewRequestWithContext(ctx, "GET", e.url+"/dns-query?dns="+base64.RawURLEncoding.EncodeToString(wire), nil)
	req.Header.Set("Accept", "application/dns-message")
	m, _ := e.do(t, req)
	if m.Rcode != dns.RcodeServerFailure {
		t.Fatalf("rcode %s, want SERVFAIL", dns.RcodeToString[m.Rcode])
	}
	if st := old.err(); st == nil {
		t.Fatal("the instance did not fail")
	}
	if all := e.pool.instances(); len(all) != 1 || all[0] == old {
		t.Fatalf("instances after the trap: %v (old %p): want it replaced", all, old)
	}
	m, _ = e.get(t, query("next.example.org", dns.TypeA))
	wantAnswer(t, m, "192.0.2.32")
}

// engine-servers.timeout-moves-on for a begun question: the first server
// drops it; the module's engine moves to the second server after the
// 2 s transaction timeout (on its worker, the question's fallback way),
// and the answer reaches the client through the begun question's end.
func TestWazeroBegunMissMovesOffDroppingServer(t *testing.T) {
	t.Parallel()
	s1 := upstreamtest.Start(t, upstreamtest.Drop())
	s2 := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.33"))
	e := startEdge(t, edgeConfig(s1, s2), 1)
	m, _ := e.get(t, query("moved.example.org", dns.TypeA))
	wantAnswer(t, m, "192.0.2.33")
	wantMovedAtTimeout(t, s1, s2)
	if begun := e.begun(); begun != 1 {
		t.Fatalf("%d begun on the reader, want the question begun there", begun)
	}
	if c := e.queryCounts(t); c.Waited != 1 {
		t.Fatalf("module's counts %+v: want the question gone on on a worker after the timeout", c)
	}
	if st := e.status(t); st.Counters.Attempts["timeout"] != 1 {
		t.Fatalf("attempts %v: want one timeout", st.Counters.Attempts)
	}
}

// A QueryStart event the module cannot read is answered abi.AskUnreadable,
// not 0 (the answer of a module that does not know the flag): the host
// sends that question by a poll and goes on beginning the next misses on
// the reader.
func TestWazeroUnreadStartEventKeepsBeginningMisses(t *testing.T) {
	t.Parallel()
	up := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.31"))
	e := startEdge(t, edgeConfig(up), 1)
	in := e.pool.all[0]
	// QueryTrace without the trace: ParseQuery finds it short.
	bad := abi.AppendEvent(nil, &abi.Event{Kind: abi.EventQuery, ID: 7, Code: abi.QueryStart | abi.QueryTrace, Data: []byte{1, 2, 3}})
	in.calling.Lock()
	if !in.memory.enter() {
		t.Fatal("the instance's memory is gone")
	}
	c := new(call)
	begun, err := in.askEventLocked(c, bad)
	in.memory.leave()
	in.unlock(finishOnWorker)
	if err != nil || begun || !c.asked {
		t.Fatalf("unread event: begun %v, asked %v, err %v; want not begun, asked, no error", begun, c.asked, err)
	}
	if in.cannotStart.Load() {
		t.Fatal("one unread event turned beginning misses on the reader off for good")
	}
	begun0 := e.begun()
	m, _ := e.get(t, query("after-unread.example.org", dns.TypeA))
	wantAnswer(t, m, "192.0.2.31")
	if e.begun() != begun0+1 {
		t.Fatalf("the next miss was not begun on the reader (%d begun, want %d)", e.begun(), begun0+1)
	}
}

// resolvedSignal is a MissContinuation that reports where its question
// was finished.
type resolvedSignal chan string

func (r resolvedSignal) ResolveHere() engine.Flusher { r <- "here"; return nil }
func (r resolvedSignal) ResolveElsewhere()           { r <- "elsewhere" }

// A begun call watched under a context that is not the front end's (no
// CancelWatcher) and is done already: context.AfterFunc closes the call
// on a goroutine of its own at once, while watch is still recording its
// stop. The close ends the question once, on a worker, and under -race
// nothing is reported: here, as in startNow, the watcher does nothing
// else that orders it before the close.
func TestWazeroBegunUnderDoneContextClosesOnce(t *testing.T) {
	t.Parallel()
	up := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.32"))
	e := startEdge(t, edgeConfig(up), 1)
	in := e.pool.all[0]
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 20 {
		wire, err := query(fmt.Sprintf("done%d.example.org", i), dns.TypeA).Pack()
		if err != nil {
			t.Fatal(err)
		}
		var m engine.Miss
		if _, ok := e.pool.AnswerNow(wire, nil, nil, &m); ok {
			t.Fatal("a miss answered at once")
		}
		c, _ := m.Held().(*call)
		if c == nil {
			t.Fatal("no call held for the miss")
		}
		done := make(resolvedSignal, 2)
		in.mu.Lock() // as startNow: in calls, then watched
		c.id, c.in, c.then, c.question = in.newID(), in, done, true
		in.calls[c.id] = c
		in.mu.Unlock()
		in.inFlight.Add(1)
		c.watch(ctx)
		select {
		case where := <-done:
			if where != "elsewhere" {
				t.Fatalf("the cancelled question was finished %s, want on a worker", where)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the cancelled question was never finished")
		}
		in.mu.Lock()
		_, still := in.calls[c.id]
		in.mu.Unlock()
		if still || !c.kept {
			t.Fatalf("after the close: still in calls %v, kept %v; want gone, kept out of the pool", still, c.kept)
		}
		select {
		case where := <-done:
			t.Fatalf("the question was finished twice (again %s)", where)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if in.InFlight() != 0 {
		t.Fatalf("%d in flight after every question was closed", in.InFlight())
	}
}
