package workpool

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// waitUntil polls cond for up to 5 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestKeptBetweenJobs: jobs run one after another reuse the kept
// goroutines rather than start one each; after Stop the waiting ones end.
// Idle counts a goroutine from just before it waits, so a Run in that
// moment (a preempted goroutine on a loaded machine) finds none waiting
// and starts another, which then stays too: a handful, never one a job.
func TestKeptBetweenJobs(t *testing.T) {
	const maxIdle = 4
	var wg sync.WaitGroup
	p := New(maxIdle, func(n int) { wg.Done() })
	for i := range 50 {
		wg.Add(1)
		p.Run(i)
		wg.Wait()
		waitUntil(t, "a goroutine to wait again", func() bool { return p.Idle() >= 1 })
	}
	if n := p.Started(); n > maxIdle {
		t.Errorf("%d goroutines started for 50 jobs one after another, want at most %d", n, maxIdle)
	}
	p.Stop()
	waitUntil(t, "the waiting goroutines to end", func() bool { return p.Idle() == 0 })
}

// TestNeverQueues: a job runs at once even when every kept goroutine is
// busy, and no more than maxIdle stay waiting afterwards.
func TestNeverQueues(t *testing.T) {
	release := make(chan struct{})
	var running sync.WaitGroup
	p := New(2, func(int) { running.Done(); <-release })
	for i := range 5 {
		running.Add(1)
		p.Run(i)
	}
	running.Wait() // all five run at once: none queued behind another
	close(release)
	waitUntil(t, "the busy goroutines to finish", func() bool { return p.Idle() == 2 })
	time.Sleep(10 * time.Millisecond)
	if n := p.Idle(); n != 2 {
		t.Errorf("%d goroutines waiting, want maxIdle 2", n)
	}
	p.Stop()
	waitUntil(t, "the waiting goroutines to end", func() bool { return p.Idle() == 0 })
}

// TestIdleGoroutinesEnd: kept goroutines that get no job for IdleTime
// end, so a burst leaves none behind; one that gets a job in time stays.
func TestIdleGoroutinesEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var running sync.WaitGroup
		p := New(8, func(i int) {
			if i > 0 {
				running.Done()
				<-release
			}
		})
		for i := 1; i <= 5; i++ {
			running.Add(1)
			p.Run(i)
		}
		running.Wait()
		close(release)
		synctest.Wait()
		if n := p.Idle(); n != 5 {
			t.Fatalf("%d goroutines waiting after the burst, want 5", n)
		}
		time.Sleep(IdleTime / 2)
		p.Run(0) // one of them gets a job, and waits IdleTime again
		synctest.Wait()
		time.Sleep(IdleTime/2 + time.Millisecond)
		synctest.Wait()
		if n := p.Idle(); n != 1 {
			t.Fatalf("%d goroutines waiting IdleTime after the burst, want the 1 that got a job since", n)
		}
		time.Sleep(IdleTime)
		synctest.Wait()
		if n := p.Idle(); n != 0 {
			t.Fatalf("%d goroutines waiting, want none", n)
		}
		if n := p.Started(); n != 5 {
			t.Errorf("%d goroutines started, want 5", n)
		}
	})
}
