package engine_test

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/enginetest"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
	"github.com/miekg/dns"
)

// A UDP socket that implements engine.DatagramExchanger gets its query
// through Exchange (never Send), later datagrams through Receive, and the
// op of an Exchange error picks the attempt's outcome.

type exchangerNet struct {
	mode string // "reply", "stray-then-reply", "send-error", "refused"

	mu        sync.Mutex
	exchanges int
	sends     int
	receives  int
}

func (n *exchangerNet) Open(t engine.Transport, server netip.AddrPort, _ netip.Addr, _ time.Time) (engine.Socket, error) {
	if t != engine.UDP {
		return nil, &engine.SocketError{Op: "connect", Class: engine.ErrRefused}
	}
	return &exchangerSock{net: n, server: server}, nil
}

type exchangerSock struct {
	net    *exchangerNet
	server netip.AddrPort
	query  *dns.Msg
}

func (s *exchangerSock) reply(b []byte, id uint16) int {
	m := upstreamtest.ReplyTo(s.query, dns.RcodeSuccess, "@ 60 IN A 192.0.2.7")
	m.Id = id
	w, err := m.Pack()
	if err != nil {
		panic(err)
	}
	return copy(b, w)
}

func (s *exchangerSock) Exchange(q, b []byte, _ time.Time) (int, netip.AddrPort, error) {
	s.net.mu.Lock()
	s.net.exchanges++
	s.net.mu.Unlock()
	s.query = new(dns.Msg)
	if err := s.query.Unpack(q); err != nil {
		return 0, netip.AddrPort{}, &engine.SocketError{Op: "send", Class: engine.ErrOther, Err: err}
	}
	switch s.net.mode {
	case "send-error":
		return 0, netip.AddrPort{}, &engine.SocketError{Op: "send", Class: engine.ErrOther}
	case "refused":
		return 0, netip.AddrPort{}, &engine.SocketError{Op: "receive", Class: engine.ErrRefused}
	case "stray-then-reply":
		return s.reply(b, s.query.Id^0x5a5a), s.server, nil
	}
	return s.reply(b, s.query.Id), s.server, nil
}

func (s *exchangerSock) Send([]byte) error {
	s.net.mu.Lock()
	s.net.sends++
	s.net.mu.Unlock()
	return &engine.SocketError{Op: "send", Class: engine.ErrOther}
}

func (s *exchangerSock) Receive(b []byte, _ time.Time) (int, netip.AddrPort, error) {
	s.net.mu.Lock()
	s.net.receives++
	s.net.mu.Unlock()
	return s.reply(b, s.query.Id), s.server, nil
}

func (s *exchangerSock) Close() error { return nil }

func exchangerEngine(t *testing.T, n *exchangerNet) (*engine.Engine, *eventLog) {
	t.Helper()
	log := &eventLog{}
	e, err := engine.New(engine.Config{
		TransactionTimeout: time.Second,
		Scopes:             []engine.ScopeConfig{{Name: "main", DefaultRoute: true, Servers: []string{"192.0.2.53:53"}}},
	}, engine.Options{Network: n, Observer: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e, log
}

func TestDatagramExchangerCarriesTheQuery(t *testing.T) {
	n := &exchangerNet{mode: "reply"}
	e, _ := exchangerEngine(t, n)
	for range 5 {
		if r := enginetest.Resolve(e, context.Background(), newQuery("x.example.test.", dns.TypeA)); r.Result != engine.ResultAnswer {
			t.Fatalf("result %v, want answer", r.Result)
		}
	}
	if n.exchanges != 5 || n.sends != 0 || n.receives != 0 {
		t.Errorf("exchanges %d sends %d receives %d, want 5 0 0", n.exchanges, n.sends, n.receives)
	}
}

// A mismatched first datagram does not end the transaction: the wait goes
// on with Receive, which brings the reply.
func TestDatagramExchangerStrayThenReceive(t *testing.T) {
	n := &exchangerNet{mode: "stray-then-reply"}
	e, _ := exchangerEngine(t, n)
	if r := enginetest.Resolve(e, context.Background(), newQuery("x.example.test.", dns.TypeA)); r.Result != engine.ResultAnswer {
		t.Fatalf("result %v, want answer", r.Result)
	}
	if n.exchanges != 1 || n.sends != 0 || n.receives != 1 {
		t.Errorf("exchanges %d sends %d receives %d, want 1 0 1", n.exchanges, n.sends, n.receives)
	}
}

// An Exchange error's op decides: a failed send is a send error, a
// refusal while waiting a receive error.
func TestDatagramExchangerErrorOps(t *testing.T) {
	for mode, want := range map[string]engine.Outcome{
		"send-error": engine.OutcomeSendError,
		"refused":    engine.OutcomeRecvError,
	} {
		t.Run(mode, func(t *testing.T) {
			n := &exchangerNet{mode: mode}
			e, log := exchangerEngine(t, n)
			enginetest.Resolve(e, context.Background(), newQuery("x.example.test.", dns.TypeA))
			as := log.attemptList()
			if len(as) == 0 {
				t.Fatal("no attempts")
			}
			for _, a := range as {
				if a.Outcome != want {
					t.Errorf("attempt %d outcome %v, want %v", a.Attempt, a.Outcome, want)
				}
			}
			if n.sends != 0 {
				t.Errorf("%d sends, want 0", n.sends)
			}
		})
	}
}
