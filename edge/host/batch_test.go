package host

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/dohfwd/dohfwd/engine/upstreamtest"
)

// TestWazeroOneProcBatchesEvents: with one P, questions that arrive
// together go to the module in few polls, not one poll each. A call into
// the module cannot be preempted, so without kick's yield each
// question's goroutine (and each socket's waiter) ran its own poll as
// soon as it was scheduled: 80 questions took over 80 polls. Not
// parallel: it sets GOMAXPROCS.
func TestWazeroOneProcBatchesEvents(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const questions = 80
	up := upstreamtest.Start(t, upstreamtest.Gather(questions, upstreamtest.Answer("@ 60 IN A 192.0.2.4")))
	e := startEdge(t, edgeConfig(up), 1)
	polls := func() uint64 { return e.sum(func(in *Instance) uint64 { return in.polls.Load() }) }
	names := make([]string, questions)
	for i := range names {
		names[i] = fmt.Sprintf("n%d.example.org", i)
	}
	before := polls()
	askAll(t, e.pool, names, "192.0.2.4")
	n := polls() - before
	t.Logf("%d questions: %d polls", questions, n)
	if n > questions/2 {
		t.Fatalf("%d distinct questions asked at once took %d polls; want at most %d", questions, n, questions/2)
	}
}
