package engine_test

import (
	"context"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/memnet"
	"github.com/miekg/dns"
)

// A TCP-first started miss (the Workers host runs the engine
// TCP-only) ends as a UDP one does: its stream, read in as many pieces as
// the host's reads bring, goes to FinishStarted once it holds a whole
// message, and anything but an answer or NXDOMAIN from it is left to
// ResolveWireMiss.

// connectingLater is memnet's network as one whose TCP Open does not
// wait for the connect (engine.ConnectsLater), as the edge module's: the
// only network StartMiss begins a TCP question on.
type connectingLater struct{ *memnet.Network }

func (connectingLater) ConnectsLater() bool { return true }

// newTCPRig is newRig with TCP the first transport, over connectingLater.
func newTCPRig(t *testing.T, cfg engine.Config) *rig {
	t.Helper()
	r := &rig{t: t, net: memnet.New(), log: &eventLog{}}
	e, err := engine.New(cfg, engine.Options{Network: connectingLater{r.net}, Observer: r.log, TCPOnly: true})
	if err != nil {
		t.Fatalf("engine.New: %v", err)
	}
	r.e = e
	t.Cleanup(r.bg.Wait)
	return r
}

// readStream reads the started TCP stream as the edge module's host does,
// into StartedWait's buffer, first at most piece bytes a read, for as
// long as StartedReadsOn asks; it returns the bytes read and the reads.
func readStream(t *testing.T, m *engine.Miss, piece int) ([]byte, int) {
	t.Helper()
	sock, buf, deadline, ok := m.StartedWait()
	if !ok {
		t.Fatal("StartedWait: no started transaction waits")
	}
	read, reads := 0, 0
	for reads == 0 || m.StartedReadsOn(buf[:read]) {
		end := min(read+piece, len(buf))
		n, _, err := sock.Receive(buf[read:end], deadline)
		reads++
		if err != nil {
			t.Fatalf("the started stream's read %d: %v", reads, err)
		}
		read += n
	}
	return buf[:read], reads
}

// TestStartedTCPMissFinishedFromItsStream: a TCP-first miss is started
// (the query framed and sent at once, no wait for the connect), its
// reply read in pieces, and FinishStarted ends it as ResolveWireMiss
// does the same question: one TCP transaction, its attempt event, the
// answer.
func TestStartedTCPMissFinishedFromItsStream(t *testing.T) {
	for _, piece := range []int{1, 7, 4096} {
		synctest.Test(t, func(t *testing.T) {
			r := newTCPRig(t, rigScope(2))
			r.net.Handle(rigServer(1), memnet.Respond(memnet.After(10*time.Millisecond, memnet.Answer("@ 60 IN A 192.0.2.1"))))
			m := startMiss(t, r.e, context.Background(), queryFor("tcp.example.", dns.TypeA))
			if tx := r.net.Transactions(); len(tx) != 1 || tx[0].Transport != engine.TCP || tx[0].Sent.IsZero() {
				t.Fatalf("transactions %+v; want one TCP query sent by StartMiss", tx)
			}
			stream, reads := readStream(t, m, piece)
			if piece == 1 && reads < 3 {
				t.Fatalf("%d reads of one byte; want the stream read on", reads)
			}
			resp, ok := r.e.FinishStarted(context.Background(), m, stream, netip.AddrPort{}, nil)
			if !ok {
				t.Fatalf("FinishStarted did not take the stream's answer (%d bytes in %d reads)", len(stream), reads)
			}
			msg := unpackReply(t, resp)
			if resp.Result != engine.ResultAnswer || resp.Attempts != 1 || msg.Id != 0xbeef || len(msg.Answer) != 1 {
				t.Fatalf("got %v, %d attempts, id %#x, answer %v", resp.Result, resp.Attempts, msg.Id, msg.Answer)
			}
			if m.Started() || m.StartedReadsOn(stream) {
				t.Fatal("FinishStarted left the miss started")
			}
			evs := r.log.attemptList()
			if len(evs) != 1 || evs[0].Outcome != engine.OutcomeAnswer || evs[0].Transport != engine.TCP || evs[0].RTT != 10*time.Millisecond {
				t.Fatalf("attempt events %+v; want one TCP answer, RTT 10ms", evs)
			}
			if r.net.OpenSockets() != 0 {
				t.Fatalf("%d sockets open; the TCP one is closed at its end", r.net.OpenSockets())
			}
		})
	}
}

// TestStartedTCPMissLeavesEveryOtherEndToResolveWireMiss: a stream whose
// first message is not an answer or NXDOMAIN from the question
// (SERVFAIL, a mismatched ID, garbage) or that ends short, a gone
// client, and a connect refused after Open are left to ResolveWireMiss:
// FinishStarted does nothing, and ResolveWireMiss ends the question
// under the rules (the next server's answer; cancelled, not charged).
func TestStartedTCPMissLeavesEveryOtherEndToResolveWireMiss(t *testing.T) {
	answer := memnet.Answer("@ 60 IN A 192.0.2.1")
	cases := []struct {
		name   string
		action memnet.Action
		cancel bool
	}{
		{"servfail", memnet.Action{Replies: []memnet.Reply{memnet.Rcode(dns.RcodeServerFailure)}}, false},
		{"mismatched ID", memnet.Action{Replies: []memnet.Reply{memnet.WrongID(answer)}}, false},
		{"garbage", memnet.Action{Replies: []memnet.Reply{memnet.Garbage()}}, false},
		{"short", memnet.Action{Replies: []memnet.Reply{memnet.Cut(answer)}, Close: true}, false},
		{"client gone", memnet.Action{Replies: []memnet.Reply{answer}}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newTCPRig(t, rigScope(2))
				r.net.Handle(rigServer(1), func(memnet.Conn) memnet.Action { return tc.action })
				r.net.Handle(rigServer(2), memnet.Respond(memnet.Answer("@ 60 IN A 192.0.2.2")))
				cc := new(engine.CancelContext)
				m := startMiss(t, r.e, cc, queryFor("other.example.", dns.TypeA))
				sock, buf, deadline, _ := m.StartedWait()
				read := 0
				for {
					n, _, err := sock.Receive(buf[read:], deadline)
					if err != nil {
						break // the short stream's EOF
					}
					if read += n; !m.StartedReadsOn(buf[:read]) {
						break
					}
				}
				if tc.cancel {
					cc.Cancel()
				}
				if _, ok := r.e.FinishStarted(cc, m, buf[:read], netip.AddrPort{}, nil); ok {
					t.Fatal("FinishStarted ended the question")
				}
				c := r.e.Counters()
				if !m.Started() || len(r.log.attemptList()) != 0 || c.MismatchedReplies != 0 || sum(c.Attempts) != 0 {
					t.Fatalf("FinishStarted did something: started %v, events %d, counters %+v", m.Started(), len(r.log.attemptList()), c)
				}
				resp := r.e.ResolveWireMiss(cc, m, nil)
				if tc.cancel {
					if resp.Result != engine.ResultCancelled || r.e.Counters().Attempts["cancelled"] != 1 {
						t.Fatalf("a gone client's question got %v, attempts %v; want cancelled", resp.Result, r.e.Counters().Attempts)
					}
					return
				}
				if resp.Result != engine.ResultAnswer || resp.Attempts != 2 {
					t.Fatalf("ResolveWireMiss then got %v (%v) in %d attempts, want the next server's answer", resp.Result, resp.Reason, resp.Attempts)
				}
			})
		})
	}
}

// TestStartedTCPConnectRefusedMovesOn: a connect that fails after Open
// handed the socket over (the edge host's) fails the started attempt as
// a connect error, charged to its server, and the question moves on.
func TestStartedTCPConnectRefusedMovesOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newTCPRig(t, rigScope(2))
		r.net.Handle(rigServer(1), func(memnet.Conn) memnet.Action {
			return memnet.Action{ReceiveError: &engine.SocketError{Op: "connect", Class: engine.ErrRefused}}
		})
		r.net.Handle(rigServer(2), memnet.Respond(memnet.Answer("@ 60 IN A 192.0.2.2")))
		m := startMiss(t, r.e, context.Background(), queryFor("refused.example.", dns.TypeA))
		resp := r.e.ResolveWireMiss(context.Background(), m, nil)
		evs := r.log.attemptList()
		if resp.Result != engine.ResultAnswer || len(evs) != 2 || evs[0].Outcome != engine.OutcomeConnectError || evs[0].Server != rigServer(1) {
			t.Fatalf("got %v, events %+v; want server 1's connect error, then server 2's answer", resp.Result, evs)
		}
	})
}

// TestStartMissLeavesTCPToResolveWireMissWhenOpenWaits: on a Network
// whose TCP Open waits for the connect (the native one), StartMiss begins
// nothing for a TCP-first question: the connect would hold its caller
// (the HTTP/2 reader) for a round trip. ResolveWireMiss asks it whole.
func TestStartMissLeavesTCPToResolveWireMissWhenOpenWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &rig{t: t, net: memnet.New(), log: &eventLog{}}
		e, err := engine.New(rigScope(1), engine.Options{Network: r.net, Observer: r.log, TCPOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		r.net.Handle(rigServer(1), memnet.Respond(memnet.Answer("@ 60 IN A 192.0.2.1")))
		m := new(engine.Miss)
		if _, ok := e.ResolveWireImmediate(mustPack(t, queryFor("wait.example.", dns.TypeA)), nil, nil, m); ok || !m.Ready() {
			t.Fatal("want a miss")
		}
		e.StartMiss(context.Background(), m, nil)
		if m.Started() || len(r.net.Transactions()) != 0 {
			t.Fatalf("StartMiss began a TCP question on a waiting Open (started %v, %d transactions)", m.Started(), len(r.net.Transactions()))
		}
		if resp := e.ResolveWireMiss(context.Background(), m, nil); resp.Result != engine.ResultAnswer {
			t.Fatalf("got %v", resp.Result)
		}
	})
}
