package host

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/doh/assembly"
	"github.com/dohfwd/dohfwd/edge/abi"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
)

// A TCP-first miss (the module run TCP-only, as the Workers glue runs it)
// continues in the module's poll as a UDP one does: its query is sent on
// a connection still connecting in the host, and its length-prefixed
// reply, read in as many pieces as the host's reads bring, is finished in
// the poll that brings its last piece. Any other end goes on on a worker
// goroutine under every rule.

// startTCPEdge is startEdge on the TCP-only runtime.
func startTCPEdge(t *testing.T, config []byte) *edge {
	t.Helper()
	return startEdgeOn(t, tcpOnlyRuntime(t), config, 1, assembly.Options{LogTo: io.Discard}, nil)
}

// piecewiseTCP is a TCP upstream on loopback that answers every query
// with an A record for ip, its framed reply written in three pieces 20 ms
// apart (the length's first byte; the length's second byte and part of
// the message; the rest), so that the module's reads each bring a piece.
func piecewiseTCP(t *testing.T, ip string) netip.AddrPort {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var n [2]byte
				if _, err := io.ReadFull(c, n[:]); err != nil {
					return
				}
				q := make([]byte, binary.BigEndian.Uint16(n[:]))
				if _, err := io.ReadFull(c, q); err != nil {
					return
				}
				m := new(dns.Msg)
				if m.Unpack(q) != nil {
					return
				}
				b, err := upstreamtest.ReplyTo(m, dns.RcodeSuccess, "@ 60 IN A "+ip).Pack()
				if err != nil {
					return
				}
				framed := binary.BigEndian.AppendUint16(nil, uint16(len(b)))
				framed = append(framed, b...)
				for _, piece := range [][]byte{framed[:1], framed[1:12], framed[12:]} {
					if _, err := c.Write(piece); err != nil {
						return
					}
					time.Sleep(20 * time.Millisecond)
				}
				io.Copy(io.Discard, c) // until the module closes
			}()
		}
	}()
	return l.Addr().(*net.TCPAddr).AddrPort()
}

// Plain TCP misses, one at a time and 64 at once, each to a server that
// answers, with the cache off and on; and misses whose reply comes in
// three pieces: every one is Finished in a poll, none Waited on a worker,
// and no goroutine of the module parked (abi.Status.Parked). Before the
// module continued TCP misses in its poll, each went on a worker: Waited
// 84, parked 84 times or more.
func TestWazeroTCPMissFinishedInPollParksNoGoroutine(t *testing.T) {
	t.Parallel()
	for _, cache := range []string{"", "cache: {max_entries: 1000}\n"} {
		up := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.1"))
		config := edgeConfig(up)
		if cache != "" {
			config = withConfig(config, cache)
		}
		e := startTCPEdge(t, config)
		askMissesInPoll(t, e, cache, "TCP misses")
		if got := transports(up); len(got) != 84 || got[0] != "tcp" || got[83] != "tcp" {
			t.Fatalf("cache %q: the upstream read %d queries (%v...), want 84 over TCP", cache, len(got), got[:min(len(got), 3)])
		}
		st := e.status(t)
		if c := st.Counters; c.Attempts["answer"] != 84 || c.Questions["answer"] != 84 || c.MismatchedReplies != 0 {
			t.Fatalf("cache %q: counters %+v; want 84 answered attempts and questions", cache, c)
		}
		if st.InFlight != 0 {
			t.Fatalf("cache %q: %d in flight after every answer, want 0", cache, st.InFlight)
		}
	}

	t.Run("reply in pieces", func(t *testing.T) {
		t.Parallel()
		server := piecewiseTCP(t, "192.0.2.3")
		config := fmt.Appendf(nil, "scopes:\n  - name: test\n    default_route: true\n    servers: [%q]\nfallback_servers: []\ncache:\n  max_entries: 0\nlog:\n  level: error\n", server.String())
		e := startTCPEdge(t, config)
		names := make([]string, 8)
		for i := range names {
			names[i] = fmt.Sprintf("piece%d.example.org", i)
		}
		askAll(t, e.pool, names, "192.0.2.3")
		if c := e.queryCounts(t); c != (abi.QueryCounts{Finished: 8}) {
			t.Fatalf("questions the module answered: %+v; want all 8 finished in a poll", c)
		}
		if n := e.parked(t); n != 0 {
			t.Fatalf("the module's goroutines parked %d times, want 0", n)
		}
	})
}

// Every other end of a started TCP miss's wait goes on on a worker
// goroutine (Waited, not Finished), which meets it under the engine's
// rules: a refused connect moves to the next server at once
// (connect_error); a SERVFAIL moves on at once; a mismatched message is
// counted once and the right one after it on the stream taken; a dropped
// query moves on after the 2 s timeout; a short reply (half a message,
// then the server hangs up) and garbage (counted as a mismatched reply)
// move on when the server hangs up; an answer longer than the started
// miss's buffer is read whole by the worker.
func TestWazeroTCPStartedMissFallsBackToWorker(t *testing.T) {
	t.Parallel()
	mismatched := func(q upstreamtest.Query) upstreamtest.Action {
		wrong := upstreamtest.ReplyTo(q.Msg, dns.RcodeSuccess, "@ 60 IN A 198.51.100.66")
		wrong.Id ^= 0x5a5a
		right := upstreamtest.ReplyTo(q.Msg, dns.RcodeSuccess, "@ 60 IN A 192.0.2.1")
		return upstreamtest.Action{Replies: []upstreamtest.Reply{{Msg: wrong}, {Msg: right, Delay: 100 * time.Millisecond}}}
	}
	short := func(q upstreamtest.Query) upstreamtest.Action {
		return upstreamtest.Action{Replies: []upstreamtest.Reply{{Msg: upstreamtest.ReplyTo(q.Msg, dns.RcodeSuccess, "@ 60 IN A 198.51.100.66"), Cut: true}}, Close: true}
	}
	garbage := func(upstreamtest.Query) upstreamtest.Action {
		return upstreamtest.Action{Replies: []upstreamtest.Reply{{Raw: []byte{0xde, 0xad, 0xbe, 0xef, 1}}}, Close: true}
	}
	// An answer longer than the started miss's buffer (4 096 bytes):
	// the worker reads the stream from its start, as the poll gives it
	// back in as many Receives as it takes.
	long := func(q upstreamtest.Query) upstreamtest.Action {
		rrs := []string{"@ 60 IN A 192.0.2.1"}
		for i := range 400 {
			rrs = append(rrs, fmt.Sprintf("@ 60 IN A 10.0.%d.%d", i/256, i%256))
		}
		return upstreamtest.Action{Replies: []upstreamtest.Reply{{Msg: upstreamtest.ReplyTo(q.Msg, dns.RcodeSuccess, rrs...)}}}
	}
	for _, tc := range []struct {
		name     string
		first    upstreamtest.Handler // nil: nothing listens
		want     string
		attempts map[string]uint64
	}{
		{"refused", nil, "192.0.2.2", map[string]uint64{"connect_error": 1, "answer": 1}},
		{"servfail", upstreamtest.Rcode(dns.RcodeServerFailure), "192.0.2.2", map[string]uint64{"rcode": 1, "answer": 1}},
		{"mismatched", mismatched, "192.0.2.1", map[string]uint64{"answer": 1}},
		{"dropped", upstreamtest.Drop(), "192.0.2.2", map[string]uint64{"timeout": 1, "answer": 1}},
		{"short", short, "192.0.2.2", map[string]uint64{"recv_error": 1, "answer": 1}},
		{"garbage", garbage, "192.0.2.2", map[string]uint64{"recv_error": 1, "answer": 1}},
		{"longer than the buffer", long, "192.0.2.1", map[string]uint64{"answer": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			first := upstreamtest.ClosedPort(t).String()
			if tc.first != nil {
				first = upstreamtest.Start(t, tc.first).String()
			}
			s2 := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.2"))
			config := fmt.Appendf(nil, "scopes:\n  - name: test\n    default_route: true\n    servers: [%q, %q]\nfallback_servers: []\ncache:\n  max_entries: 0\nlog:\n  level: error\n", first, s2.String())
			e := startTCPEdge(t, config)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			m, err := ask(ctx, e.pool, "fallback.example.org")
			if err != nil {
				t.Fatal(err)
			}
			wantAnswer(t, m, tc.want)
			if tc.first != nil && tc.name == "longer than the buffer" && len(m.Answer) != 401 {
				t.Fatalf("%d answers, want the 401 sent", len(m.Answer))
			}
			st := wantWentToWorker(t, e, tc.attempts)
			// The wrong message, or the garbage framed as one, is counted.
			if want := map[bool]uint64{true: 1}[tc.name == "mismatched" || tc.name == "garbage"]; st.MismatchedReplies != want {
				t.Fatalf("mismatched_replies %d, want %d (counted once, by the worker)", st.MismatchedReplies, want)
			}
		})
	}
}
