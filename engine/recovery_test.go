package engine_test

import (
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/enginetest"
	"github.com/dohfwd/dohfwd/engine/memnet"
	"github.com/miekg/dns"
)

// TestRecoveryWhileAllFail is sticky recovery
// ([*engine-servers.demotion-marks-address-for-30-seconds]): with every server
// failing for ten minutes under one question a second, then one of them
// recovering, at any position, client questions are answered by it within
// 35 s. Failing servers either stay silent (each attempt costs the full
// 2 s) or refuse at once.
func TestRecoveryWhileAllFail(t *testing.T) {
	const failing = 10 * time.Minute
	modes := map[string]memnet.Handler{
		"silent":  memnet.Silent(),
		"refused": memnet.Respond(memnet.Rcode(dns.RcodeRefused)),
		"icmp":    memnet.Fail("receive", engine.ErrRefused),
	}
	for _, servers := range []int{4, 6} {
		for mode, fail := range modes {
			for pos := 1; pos <= servers; pos++ {
				t.Run(fmt.Sprintf("%d servers/%s/recovers %d", servers, mode, pos), func(t *testing.T) {
					t.Parallel()
					synctest.Test(t, func(t *testing.T) {
						r := newRig(t, rigScope(servers))
						start := time.Now()
						recovered := start.Add(failing)
						good := memnet.Respond(memnet.Answer("@ 60 IN A 192.0.2.1"))
						for i := 1; i <= servers; i++ {
							r.net.Handle(rigServer(i), func(c memnet.Conn) memnet.Action {
								if i == pos && !time.Now().Before(recovered) {
									return good(c)
								}
								return fail(c)
							})
						}
						var mu sync.Mutex
						var firstAnswer time.Time
						var late, lateAnswered int // questions asked 35 s after recovery
						for k := 0; time.Since(start) < failing+time.Minute; k++ {
							asked := time.Now()
							q := newQuery(fmt.Sprintf("q%d.example.", k), dns.TypeA)
							r.bg.Go(func() {
								res := enginetest.Resolve(r.e, t.Context(), q)
								mu.Lock()
								defer mu.Unlock()
								ok := res.Result == engine.ResultAnswer
								if ok && (firstAnswer.IsZero() || time.Now().Before(firstAnswer)) {
									firstAnswer = time.Now()
								}
								if asked.After(recovered.Add(35 * time.Second)) {
									late++
									if ok {
										lateAnswered++
									}
								}
							})
							time.Sleep(time.Second)
						}
						r.bg.Wait()
						if firstAnswer.IsZero() {
							t.Fatal("the recovered server never answered")
						}
						if d := firstAnswer.Sub(recovered); d > 35*time.Second {
							t.Fatalf("first answer %v after recovery, want within 35s", d)
						}
						if firstAnswer.Before(recovered) {
							t.Fatalf("answered %v before the recovery", recovered.Sub(firstAnswer))
						}
						// Afterwards the recovered server keeps answering. A
						// dead server whose mark ran out is asked first again
						// (the rules want it), so with more than three dead
						// peers a question now and then spends its three
						// attempts on them: most, not all, are answered.
						if lateAnswered*4 < late*3 {
							t.Fatalf("only %d of %d questions asked 35s after recovery were answered", lateAnswered, late)
						}
						t.Logf("first answer %v after recovery; then %d of %d answered", firstAnswer.Sub(recovered), lateAnswered, late)
					})
				})
			}
		}
	}
}
