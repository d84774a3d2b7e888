package engine

import (
	"net/netip"
	"testing"
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
