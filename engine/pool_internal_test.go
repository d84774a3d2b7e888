package engine

import (
	"net/netip"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// countingSocket is a Socket that only records Close.
type countingSocket struct{ closed int }

func (s *countingSocket) Send([]byte) error { return nil }
func (s *countingSocket) Receive([]byte, time.Time) (int, netip.AddrPort, error) {
	return 0, netip.AddrPort{}, nil
}
func (s *countingSocket) Close() error { s.closed++; return nil }

// A pool reuses nothing until it holds minChoice sockets to choose from.
func TestSocketPoolReusesOnlyAboveTheFloor(t *testing.T) {
	p := &socketPool{}
	defer p.close()
	now := time.Now()
	for range minChoice - 1 {
		p.put(pooledSocket{sock: &countingSocket{}, born: now}, now)
	}
	if _, ok := p.take(now.Add(2 * time.Second)); ok {
		t.Fatalf("took a socket from %d idle, want none below %d", minChoice-1, minChoice)
	}
	p.put(pooledSocket{sock: &countingSocket{}, born: now}, now)
	if _, ok := p.take(now.Add(2 * time.Second)); !ok {
		t.Fatalf("took nothing from %d idle sockets", minChoice)
	}
}

// No socket lives past maxSocketLife: one whose life would end before the
// transaction's deadline is closed instead of handed out, one too old is
// not taken back, and the sweep closes idle ones that reach the end.
func TestSocketPoolSocketLife(t *testing.T) {
	p := &socketPool{}
	defer p.close()
	now := time.Now()
	old := make([]*countingSocket, minChoice)
	for i := range old {
		old[i] = &countingSocket{}
		p.put(pooledSocket{sock: old[i], born: now.Add(-maxSocketLife + 2*time.Second)}, now)
	}
	if _, ok := p.take(now.Add(2 * time.Second)); ok {
		t.Fatal("handed out a socket whose life ends before the transaction's deadline")
	}
	closed := 0
	for _, s := range old {
		closed += s.closed
	}
	if closed != 1 || p.size() != minChoice-1 {
		t.Errorf("closed %d, %d idle; want the one drawn closed, %d idle", closed, p.size(), minChoice-1)
	}
	late := &countingSocket{}
	p.put(pooledSocket{sock: late, born: now.Add(-maxSocketLife + lifeMargin/2)}, now)
	if late.closed != 1 {
		t.Error("took back a socket at the end of its life")
	}
	p.sweepOld()
	if p.size() != 0 {
		t.Errorf("%d idle sockets after the sweep, want 0: all reach their end within the sweep interval", p.size())
	}
	for i, s := range old {
		if s.closed != 1 {
			t.Errorf("socket %d closed %d times, want 1", i, s.closed)
		}
	}
}

// A closed pool takes nothing back.
func TestSocketPoolClosedTakesNothingBack(t *testing.T) {
	p := &socketPool{}
	p.close()
	s := &countingSocket{}
	p.put(pooledSocket{sock: s, born: time.Now()}, time.Now())
	if s.closed != 1 || p.size() != 0 {
		t.Errorf("closed pool kept a socket (closed=%d idle=%d)", s.closed, p.size())
	}
}

// sweptSocket is a countingSocket the sweep may close from its goroutine.
type sweptSocket struct {
	countingSocket
	closed atomic.Int32
}

func (s *sweptSocket) Close() error { s.closed.Add(1); return nil }

// idleSockets returns n idle sockets born and last put back at the times
// given.
func idleSockets(n int, born, idleSince time.Time) []pooledSocket {
	out := make([]pooledSocket, n)
	for i := range out {
		out[i] = pooledSocket{sock: &countingSocket{}, born: born, idleSince: idleSince}
	}
	return out
}

// The sweep's rule: sockets above the floor go once unused for
// idleExpiry; the floor stays while the pool was used within idleExpiry
// and goes after; a socket at the end of its life goes, floor or not.
func TestSocketPoolExpireKeepsTheFloorWhileInUse(t *testing.T) {
	now := time.Now()
	born := now.Add(-idleExpiry - time.Second)
	cases := []struct {
		name     string
		idle     []pooledSocket
		used     time.Time
		wantKeep int
	}{
		{"fresh sockets above the floor stay", idleSockets(minChoice+100, born, now.Add(-idleExpiry/2)), now, minChoice + 100},
		{"stale sockets above the floor go, the floor stays while in use", idleSockets(minChoice+100, born, now.Add(-idleExpiry)), now.Add(-idleExpiry / 2), minChoice},
		{"stale sockets below the floor stay while in use", idleSockets(minChoice/2, born, now.Add(-idleExpiry)), now.Add(-time.Second), minChoice / 2},
		{"the floor goes idleExpiry after the last use", idleSockets(minChoice, born, now.Add(-idleExpiry)), now.Add(-idleExpiry), 0},
		{"sockets put back recently stay after the last use", idleSockets(3, born, now.Add(-time.Second)), now.Add(-idleExpiry), 3},
		{"the end of life goes in the floor too", idleSockets(minChoice, now.Add(-maxSocketLife+lifeMargin), now), now, 0},
		{"mixed: stale beyond the floor go, fresh stay",
			append(idleSockets(minChoice, born, now.Add(-2*idleExpiry)), idleSockets(50, born, now)...), now, minChoice},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := len(c.idle)
			keep, old := expire(c.idle, now, c.used)
			if len(keep) != c.wantKeep || len(old) != n-c.wantKeep {
				t.Fatalf("kept %d, gave up %d of %d; want %d kept", len(keep), len(old), n, c.wantKeep)
			}
			seen := map[Socket]bool{}
			for _, s := range append(append([]pooledSocket(nil), keep...), old...) {
				if s.sock == nil || seen[s.sock] {
					t.Fatalf("a socket lost or counted twice")
				}
				seen[s.sock] = true
			}
		})
	}
	// The fresh ones of the mixed case are those kept beyond the floor's
	// stale: the floor keeps stale sockets only up to minChoice in all.
	idle := append(idleSockets(minChoice, born, now.Add(-2*idleExpiry)), idleSockets(50, born, now)...)
	keep, _ := expire(idle, now, now)
	fresh := 0
	for _, s := range keep {
		if s.idleSince.Equal(now) {
			fresh++
		}
	}
	if fresh != 50 {
		t.Errorf("kept %d of the 50 sockets just put back, want all", fresh)
	}
}

// Through the pool's own sweep, on a fake clock: a burst's sockets above
// the floor go idleExpiry after the burst while the server stays in use;
// idleExpiry after its last clean transaction the pool is empty, every
// socket closed once.
func TestSocketPoolIdleExpiryThroughTheSweep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &socketPool{}
		defer p.close()
		var all []*sweptSocket
		put := func(n int) {
			now := time.Now()
			for range n {
				s := &sweptSocket{}
				all = append(all, s)
				p.put(pooledSocket{sock: s, born: now}, now)
			}
		}
		put(minChoice + 200) // a burst
		time.Sleep(idleExpiry / 2)
		// The server stays in use: a transaction every second on a
		// socket taken and put back.
		for range int((idleExpiry + 2*sweepInterval) / time.Second) {
			s, ok := p.take(time.Now().Add(time.Second))
			if !ok {
				t.Fatalf("nothing to take from %d idle", p.size())
			}
			p.put(s, time.Now())
			time.Sleep(time.Second)
		}
		if n := p.size(); n < minChoice || n > minChoice+int(idleExpiry/time.Second)+2 {
			t.Errorf("%d idle while in use after the burst, want the floor (%d) and the few used since", n, minChoice)
		}
		// The floor reuses: a socket is still taken.
		if _, ok := p.take(time.Now().Add(time.Second)); !ok {
			t.Error("the floor kept while in use hands out nothing")
		}
		time.Sleep(idleExpiry + 2*sweepInterval)
		if n := p.size(); n != 0 {
			t.Errorf("%d idle sockets idleExpiry after the last use, want 0", n)
		}
		closed := 0
		for _, s := range all {
			n := int(s.closed.Load())
			if n > 1 {
				t.Fatalf("a socket closed %d times", n)
			}
			closed += n
		}
		if closed != len(all)-1 {
			t.Errorf("%d of %d sockets closed, want all but the one taken", closed, len(all))
		}
	})
}
