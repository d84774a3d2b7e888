package host

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/dohfwd/dohfwd/edge/abi"
	"github.com/dohfwd/dohfwd/engine"
)

// udpHost is an Instance with no module, enough for its UDP sockets: the
// events their waiters queue stay in events (kick polls nothing: the
// instance counts as closed to it), for the test to read.
func udpHost(t *testing.T) (*Instance, *net.UDPConn) {
	t.Helper()
	in := &Instance{network: engine.NativeNetwork{}, calls: map[uint32]*call{}, sockets: map[uint32]*socket{}, closed: true}
	peer, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		peer.Close()
		in.fail(errClosed)
	})
	return in, peer
}

// openTo opens a host UDP socket to peer as sock_open does.
func openTo(t *testing.T, in *Instance, peer *net.UDPConn) *socket {
	t.Helper()
	fd, code := in.open(engine.UDP, peer.LocalAddr().(*net.UDPAddr).AddrPort(), netip.Addr{}, time.Now().Add(time.Minute))
	if code != 0 {
		t.Fatalf("open: class %d", code)
	}
	s := in.socket(fd)
	if s == nil || s.udp == nil {
		t.Fatal("the native UDP socket has no waiter")
	}
	return s
}

// send is sock_send on s.
func send(t *testing.T, s *socket, b []byte) {
	t.Helper()
	s.mu.Lock()
	s.udp.sentSinceRead = true
	s.mu.Unlock()
	if err := s.sock.Send(b); err != nil {
		t.Fatal(err)
	}
}

// reply answers the last datagram peer got with b.
func reply(t *testing.T, peer *net.UDPConn, b []byte) {
	t.Helper()
	buf := make([]byte, 512)
	peer.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, from, err := peer.ReadFromUDPAddrPort(buf)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := peer.WriteToUDPAddrPort(b, from); err != nil {
		t.Fatal(err)
	}
}

// nextRead waits for the next queued event, which must be an EventRead on
// s carrying want.
func nextRead(t *testing.T, in *Instance, s *socket, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		in.mu.Lock()
		b := in.events
		in.mu.Unlock()
		if len(b) > 0 {
			e, rest, err := abi.ParseEvent(b)
			if err != nil {
				t.Fatal(err)
			}
			if e.Kind != abi.EventRead || e.ID != s.fd || e.Code != 0 || string(e.Data) != want {
				t.Fatalf("event kind %d id %d code %d data %q; want a read on %d of %q", e.Kind, e.ID, e.Code, e.Data, s.fd, want)
			}
			if e.From != s.udp.peer {
				t.Fatalf("read from %v; want the server %v", e.From, s.udp.peer)
			}
			in.mu.Lock()
			in.events = append(in.events[:0], in.events[len(b)-len(rest):]...)
			in.mu.Unlock()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no read of %q came", want)
		}
		time.Sleep(time.Millisecond)
	}
}

// A UDP socket serves transaction after transaction with one waiter: a
// reply that comes after sock_recv wakes it; one that came before is read
// by sock_recv itself; a datagram queued behind a delivered one is read
// when the module asks again without sending. Each becomes one EventRead.
func TestUDPSocketWaiterReads(t *testing.T) {
	t.Parallel()
	in, peer := udpHost(t)
	s := openTo(t, in, peer)

	// The reply comes while the read waits.
	send(t, s, []byte("q1"))
	if code := in.read(s, 512, time.Time{}); code != 0 {
		t.Fatalf("sock_recv: class %d", code)
	}
	reply(t, peer, []byte("r1"))
	nextRead(t, in, s, "r1")

	// The reply comes before the read is asked for.
	send(t, s, []byte("q2"))
	reply(t, peer, []byte("r2"))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		s.mu.Lock()
		unread := s.udp.unread
		s.mu.Unlock()
		if unread || time.Now().After(deadline) {
			break
		}
	}
	if code := in.read(s, 512, time.Time{}); code != 0 {
		t.Fatalf("sock_recv: class %d", code)
	}
	nextRead(t, in, s, "r2")

	// Two datagrams at once: the second is read when asked for, no send
	// between.
	send(t, s, []byte("q3"))
	if code := in.read(s, 512, time.Time{}); code != 0 {
		t.Fatalf("sock_recv: class %d", code)
	}
	buf := make([]byte, 512)
	_, from, err := peer.ReadFromUDPAddrPort(buf)
	if err != nil {
		t.Fatal(err)
	}
	peer.WriteToUDPAddrPort([]byte("late"), from)
	peer.WriteToUDPAddrPort([]byte("r3"), from)
	nextRead(t, in, s, "late")
	if code := in.read(s, 512, time.Time{}); code != 0 {
		t.Fatalf("sock_recv: class %d", code)
	}
	nextRead(t, in, s, "r3")
	if n := in.receiving.Load(); n != 0 {
		t.Fatalf("%d reads under way after every reply came; want 0", n)
	}
}

// sock_close on a socket whose waiter waits (an idle pooled socket, or one
// with a read under way) ends the waiter, which closes the descriptor,
// and counts the read no longer under way.
func TestUDPSocketCloseEndsWaiter(t *testing.T) {
	t.Parallel()
	in, peer := udpHost(t)
	idle := openTo(t, in, peer)
	busy := openTo(t, in, peer)
	send(t, busy, []byte("q"))
	if code := in.read(busy, 512, time.Time{}); code != 0 {
		t.Fatalf("sock_recv: class %d", code)
	}
	for _, s := range []*socket{idle, busy} {
		if !in.close(s.fd) {
			t.Fatalf("close of %d: no such socket", s.fd)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, s := range []*socket{idle, busy} {
		for s.udp.raw.Control(func(uintptr) {}) == nil {
			if time.Now().After(deadline) {
				t.Fatalf("socket %d still open after sock_close", s.fd)
			}
			time.Sleep(time.Millisecond)
		}
	}
	for in.receiving.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d reads still counted under way after sock_close", in.receiving.Load())
		}
		time.Sleep(time.Millisecond)
	}
	if code := in.read(busy, 512, time.Time{}); code != uint32(engine.ErrClosed) {
		t.Fatalf("sock_recv on a closed socket: class %d; want closed (%d)", code, engine.ErrClosed)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.events) != 0 {
		t.Fatal("a closed socket's read sent an event")
	}
}
