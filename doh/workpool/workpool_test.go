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

// TestIdleGoroutinesEnd: after a burst, the goroutines no job needs end
// within two windows while a trickle goes on, which starts few (a job
// goes to the goroutine that waited longest, so a trickle's goroutines
// all look unneeded at the counts: one start a window at most); once the
// jobs stop, none lives and no count runs.
func TestIdleGoroutinesEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var running sync.WaitGroup
		p := New(64, func(block bool) {
			if block {
				running.Done()
				<-release
			}
		})
		defer p.Stop()
		for range 40 {
			running.Add(1)
			p.Run(true)
		}
		running.Wait()
		close(release)
		synctest.Wait()
		if n := p.Idle(); n != 40 {
			t.Fatalf("%d goroutines waiting after the burst, want 40", n)
		}
		// A trickle: one job at a time, ten between counts, for two windows.
		for range 2 * trimSamples * 10 {
			p.Run(false)
			time.Sleep(trimInterval / 10)
		}
		synctest.Wait()
		if n := p.Live(); n > 1 {
			t.Errorf("%d goroutines live under a trickle two windows after the burst, want at most the one it uses", n)
		}
		started := p.Started()
		time.Sleep(2 * trimSamples * trimInterval)
		synctest.Wait()
		if n := p.Live(); n != 0 {
			t.Errorf("%d goroutines live two windows after the last job, want 0", n)
		}
		if started > 40+3 {
			t.Errorf("%d goroutines started for a burst of 40 and a trickle of two windows, want at most 43", started)
		}
		p.trim.mu.Lock()
		armed := p.trim.timer != nil
		p.trim.mu.Unlock()
		if armed {
			t.Error("the count still runs with no goroutine live")
		}
	})
}
