//go:build !wasip1 && !js

package engine

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"
)

// The native UDP socket's Exchange (DatagramExchanger) on real loopback
// sockets: the send happens inside the wait, so a reply that comes at
// once must not be missed, and every failure keeps its class.

// udpPeer is a loopback UDP server that answers each datagram with what
// reply returns (nothing when it returns nil).
func udpPeer(t *testing.T, reply func(q []byte) [][]byte) netip.AddrPort {
	t.Helper()
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	go func() {
		b := make([]byte, 4096)
		for {
			n, from, err := c.ReadFromUDPAddrPort(b)
			if err != nil {
				return
			}
			for _, r := range reply(b[:n]) {
				c.WriteToUDPAddrPort(r, from)
			}
		}
	}()
	return c.LocalAddr().(*net.UDPAddr).AddrPort()
}

func openNativeUDP(t *testing.T, server netip.AddrPort) *udpSocket {
	t.Helper()
	s, err := NativeNetwork{}.Open(UDP, server, netip.Addr{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	u, ok := s.(*udpSocket)
	if !ok {
		t.Fatalf("native UDP socket is %T", s)
	}
	var _ DatagramExchanger = u
	return u
}

func wantClass(t *testing.T, err error, op string, class ErrorClass) {
	t.Helper()
	var se *SocketError
	if !errors.As(err, &se) {
		t.Fatalf("error %v (%T), want a *SocketError", err, err)
	}
	if se.Op != op || se.Class != class {
		t.Fatalf("error %v: op %q class %v, want %q %v", err, se.Op, se.Class, op, class)
	}
}

// Many exchanges in a row on one socket against an echo peer that answers
// at once: each gets its own reply, from the peer, and none waits for its
// deadline (a reply that came before the wait began would be lost).
// Both ways are run: reading right after the send (immediate replies
// seen often), and waiting on the poller first (probing every 16th use).
func TestNativeExchangeGetsImmediateReplies(t *testing.T) {
	bothReadModes(t, exchangeEchoes)
}

// bothReadModes runs f with the estimate of immediate replies set high
// (Exchange reads right after the send) and low (it waits first). One
// exchange moves the estimate by 1/16 only, so tests of one or two
// exchanges run in the mode set.
func bothReadModes(t *testing.T, f func(t *testing.T)) {
	defer immediate.Store(immediate.Load())
	for _, mode := range []struct {
		name      string
		immediate int32
	}{{"read-first", immediateScale}, {"wait-first", 0}} {
		t.Run(mode.name, func(t *testing.T) {
			immediate.Store(mode.immediate)
			f(t)
		})
	}
}

func exchangeEchoes(t *testing.T) {
	server := udpPeer(t, func(q []byte) [][]byte { return [][]byte{append([]byte(nil), q...)} })
	s := openNativeUDP(t, server)
	buf := make([]byte, 512)
	for i := range 2000 {
		q := []byte{byte(i >> 8), byte(i), 'q'}
		n, from, err := s.Exchange(q, buf, time.Now().Add(5*time.Second))
		if err != nil {
			t.Fatalf("exchange %d: %v", i, err)
		}
		if from != server {
			t.Fatalf("exchange %d: reply from %v, want %v", i, from, server)
		}
		if !bytes.Equal(buf[:n], q) {
			t.Fatalf("exchange %d: reply %x, want %x", i, buf[:n], q)
		}
	}
}

// A second datagram after the first is there for Receive: Exchange takes
// one datagram only.
func TestNativeExchangeThenReceive(t *testing.T) { bothReadModes(t, nativeExchangeThenReceive) }

func nativeExchangeThenReceive(t *testing.T) {
	server := udpPeer(t, func(q []byte) [][]byte { return [][]byte{[]byte("first"), []byte("second")} })
	s := openNativeUDP(t, server)
	buf := make([]byte, 512)
	n, _, err := s.Exchange([]byte("q"), buf, time.Now().Add(5*time.Second))
	if err != nil || string(buf[:n]) != "first" {
		t.Fatalf("exchange: %q %v, want first", buf[:n], err)
	}
	n, from, err := s.Receive(buf, time.Now().Add(5*time.Second))
	if err != nil || string(buf[:n]) != "second" || from != server {
		t.Fatalf("receive: %q from %v, %v; want second from %v", buf[:n], from, err, server)
	}
}

// A closed port answers with ICMP port unreachable: the connected socket
// learns it during the wait, as a refusal, not at its deadline.
func TestNativeExchangeRefused(t *testing.T) { bothReadModes(t, nativeExchangeRefused) }

func nativeExchangeRefused(t *testing.T) {
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	server := c.LocalAddr().(*net.UDPAddr).AddrPort()
	c.Close()
	s := openNativeUDP(t, server)
	_, _, err = s.Exchange([]byte("q"), make([]byte, 512), time.Now().Add(time.Minute))
	wantClass(t, err, "receive", ErrRefused)
	// The pending error was taken by the read; a refusal on the next
	// send reports as the send's (the engine closes the socket anyway).
	_, _, err = s.Exchange([]byte("q"), make([]byte, 512), time.Now().Add(time.Minute))
	var se *SocketError
	if !errors.As(err, &se) || se.Class != ErrRefused {
		t.Fatalf("second exchange: %v, want a refusal", err)
	}
}

// A silent peer: the wait ends at the deadline, class timeout.
func TestNativeExchangeTimeout(t *testing.T) { bothReadModes(t, nativeExchangeTimeout) }

func nativeExchangeTimeout(t *testing.T) {
	server := udpPeer(t, func([]byte) [][]byte { return nil })
	s := openNativeUDP(t, server)
	_, _, err := s.Exchange([]byte("q"), make([]byte, 512), time.Now().Add(50*time.Millisecond))
	wantClass(t, err, "receive", ErrTimeout)
}

// Closing the socket from another goroutine ends the wait (how a client
// that goes away stops its transaction): class closed.
func TestNativeExchangeClosedWhileWaiting(t *testing.T) {
	bothReadModes(t, nativeExchangeClosedWhileWaiting)
}

func nativeExchangeClosedWhileWaiting(t *testing.T) {
	server := udpPeer(t, func([]byte) [][]byte { return nil })
	s := openNativeUDP(t, server)
	time.AfterFunc(20*time.Millisecond, func() { s.Close() })
	_, _, err := s.Exchange([]byte("q"), make([]byte, 512), time.Now().Add(time.Minute))
	wantClass(t, err, "receive", ErrClosed)
	// A closed socket cannot exchange again: nothing is sent.
	_, _, err = s.Exchange([]byte("q"), make([]byte, 512), time.Now().Add(time.Minute))
	wantClass(t, err, "send", ErrClosed)
}

// A query too big for a datagram fails at the send, with the send's op,
// so the engine reports a send error.
func TestNativeExchangeSendError(t *testing.T) {
	server := udpPeer(t, func([]byte) [][]byte { return nil })
	s := openNativeUDP(t, server)
	_, _, err := s.Exchange(make([]byte, 70000), make([]byte, 512), time.Now().Add(time.Minute))
	var se *SocketError
	if !errors.As(err, &se) || se.Op != "send" {
		t.Fatalf("oversized send: %v, want a send error", err)
	}
}

// The estimate follows what the reads right after the send find: a run
// of empty reads turns them off, a run of replies found turns them on.
func TestImmediateEstimateFollowsReads(t *testing.T) {
	defer immediate.Store(immediate.Load())
	immediate.Store(immediateScale)
	for range 30 {
		noteImmediate(false)
	}
	if v := immediate.Load(); v > readFirstAbove {
		t.Fatalf("after 30 empty reads the estimate is %d/%d: still reading first", v, immediateScale)
	}
	for range 30 {
		noteImmediate(true)
	}
	if v := immediate.Load(); v <= readFirstAbove {
		t.Fatalf("after 30 replies found the estimate is %d/%d: still waiting first", v, immediateScale)
	}
}

// A pooled socket keeps the read deadline an earlier transaction set when
// it is at most keptDeadlineSlack earlier than the next one's; a reply
// that comes after the kept deadline but before the transaction's own is
// still received, and a deadline earlier than the kept one is set.
func TestNativeExchangeKeptDeadline(t *testing.T) {
	server := udpPeer(t, func(q []byte) [][]byte {
		switch string(q) {
		case "late":
			time.Sleep(80 * time.Millisecond)
		case "silent":
			return nil
		}
		return [][]byte{q}
	})
	buf := make([]byte, 512)
	var s *udpSocket
	var d2 time.Time
	// On a loaded machine the runtime may take the late reply before it
	// runs the kept deadline's timer: the exchange then ends well with d1
	// untouched, and shows nothing of the wait on. Try again, on a new
	// socket, a few times.
	for try := 1; ; try++ {
		s = openNativeUDP(t, server)
		d1 := time.Now().Add(50 * time.Millisecond)
		if n, _, err := s.Exchange([]byte("now"), buf, d1); err != nil || string(buf[:n]) != "now" {
			t.Fatalf("first: %q %v", buf[:n], err)
		}
		// Within the slack: d1 stays, passes before the reply, and the
		// exchange waits on until d2.
		d2 = d1.Add(keptDeadlineSlack * 3 / 4)
		if n, _, err := s.Exchange([]byte("late"), buf, d2); err != nil || string(buf[:n]) != "late" {
			t.Fatalf("reply after the kept deadline: %q %v", buf[:n], err)
		}
		if s.rdeadline.Equal(d2) {
			break
		}
		if !s.rdeadline.Equal(d1) || try == 5 {
			t.Fatalf("deadline %v after the wait, want the transaction's %v", s.rdeadline, d2)
		}
		t.Logf("try %d: the reply was read before d1's timer ran", try)
	}
	d3 := d2.Add(time.Millisecond)
	if n, _, err := s.Exchange([]byte("now"), buf, d3); err != nil || string(buf[:n]) != "now" || !s.rdeadline.Equal(d2) {
		t.Fatalf("within the slack: %q %v, deadline %v, want %v kept", buf[:n], err, s.rdeadline, d2)
	}
	// Earlier than the kept deadline: set, and the wait ends there.
	start := time.Now()
	d4 := start.Add(30 * time.Millisecond)
	_, _, err := s.Exchange([]byte("silent"), buf, d4)
	wantClass(t, err, "receive", ErrTimeout)
	if !s.rdeadline.Equal(d4) || time.Since(start) > time.Second {
		t.Fatalf("deadline %v, waited %v; want %v", s.rdeadline, time.Since(start), d4)
	}
}
