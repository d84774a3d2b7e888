package engine_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/enginetest"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
	"github.com/miekg/dns"
)

// Integration over real UDP and TCP sockets on 127.0.0.1: the native
// network against the programmable upstream.

// realEngine is an engine over the native network asking servers in order,
// with a short transaction timeout so drops cost little real time.
func realEngine(t *testing.T, timeout time.Duration, servers ...string) (*engine.Engine, *eventLog) {
	t.Helper()
	log := &eventLog{}
	cfg := engine.Config{
		TransactionTimeout: timeout,
		Scopes:             []engine.ScopeConfig{{Name: "main", DefaultRoute: true, Servers: servers}},
	}
	e, err := engine.New(cfg, engine.Options{Network: engine.NativeNetwork{}, Observer: log})
	if err != nil {
		t.Fatal(err)
	}
	return e, log
}

func realAsk(t *testing.T, e *engine.Engine, name string, qtype uint16) enginetest.Response {
	t.Helper()
	q := newQuery(name, qtype)
	q.Id = 0x1234
	res := enginetest.Resolve(e, context.Background(), q)
	if res.Msg.Id != 0x1234 {
		t.Fatalf("client ID %#x, want 0x1234", res.Msg.Id)
	}
	return res
}

func TestIntegrationFailuresThenAnswer(t *testing.T) {
	bigTXT := func(q upstreamtest.Query) upstreamtest.Action {
		var rrs []string
		for i := range 20 {
			rrs = append(rrs, `@ 60 IN TXT "`+strings.Repeat(string(rune('a'+i)), 200)+`"`)
		}
		return upstreamtest.Action{Replies: []upstreamtest.Reply{{Msg: upstreamtest.ReplyTo(q.Msg, dns.RcodeSuccess, rrs...)}}}
	}
	cases := []struct {
		name     string
		first    upstreamtest.Handler
		outcomes []string
		hangUp   bool
	}{
		{name: "drop", first: upstreamtest.Drop(), outcomes: []string{"udp/timeout", "udp/answer"}},
		{name: "SERVFAIL", first: upstreamtest.Rcode(dns.RcodeServerFailure), outcomes: []string{"udp/rcode", "udp/answer"}},
		{name: "REFUSED", first: upstreamtest.Rcode(dns.RcodeRefused), outcomes: []string{"udp/rcode", "udp/answer"}},
		{name: "FORMERR", first: upstreamtest.Rcode(dns.RcodeFormatError), outcomes: []string{"udp/rcode", "udp/answer"}},
		{name: "BADVERS (extended)", first: upstreamtest.Rcode(dns.RcodeBadVers), outcomes: []string{"udp/rcode", "udp/answer"}},
		{name: "delay within the timeout", first: upstreamtest.Delay(100*time.Millisecond, upstreamtest.Answer("@ 60 IN A 192.0.2.1")), outcomes: []string{"udp/answer"}},
		{name: "delay past the timeout", first: upstreamtest.Delay(900*time.Millisecond, upstreamtest.Answer("@ 60 IN A 192.0.2.1")), outcomes: []string{"udp/timeout", "udp/answer"}},
		{name: "TC then TCP", first: upstreamtest.ByTransport(upstreamtest.Truncated(), bigTXT), outcomes: []string{"udp/truncated", "tcp/answer"}},
		{name: "wrong ID then right", first: func(q upstreamtest.Query) upstreamtest.Action {
			bad := upstreamtest.ReplyTo(q.Msg, dns.RcodeSuccess, "@ 60 IN A 192.0.2.66")
			bad.Id++
			return upstreamtest.Action{Replies: []upstreamtest.Reply{{Msg: bad}, {Delay: 50 * time.Millisecond, Msg: upstreamtest.ReplyTo(q.Msg, dns.RcodeSuccess, "@ 60 IN A 192.0.2.1")}}}
		}, outcomes: []string{"udp/answer"}},
		{name: "garbage then right", first: func(q upstreamtest.Query) upstreamtest.Action {
			return upstreamtest.Action{Replies: []upstreamtest.Reply{{Raw: []byte("not dns")}, {Delay: 50 * time.Millisecond, Msg: upstreamtest.ReplyTo(q.Msg, dns.RcodeSuccess, "@ 60 IN A 192.0.2.1")}}}
		}, outcomes: []string{"udp/answer"}},
		{name: "TCP close mid-reply", first: upstreamtest.ByTransport(upstreamtest.Truncated(), func(q upstreamtest.Query) upstreamtest.Action {
			a := bigTXT(q)
			a.Replies[0].Cut, a.Close = true, true
			return a
		}), outcomes: []string{"udp/truncated", "tcp/recv_error", "udp/answer"}},
		{name: "TCP hang-up before the query is read", first: upstreamtest.Truncated(), hangUp: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			first := upstreamtest.Start(t, c.first)
			second := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.2"))
			if c.hangUp {
				first.HangUpBeforeRead(true)
			}
			e, log := realEngine(t, 500*time.Millisecond, first.String(), second.String())
			res := realAsk(t, e, "www.example.", dns.TypeA)
			got := log.outcomes()
			if c.hangUp {
				// Where the reset lands depends on timing: on the connect,
				// the write or the read. Each is a failure of the attempt.
				tcpFailed := got[1] == "tcp/connect_error" || got[1] == "tcp/send_error" || got[1] == "tcp/recv_error"
				if len(got) != 3 || got[0] != "udp/truncated" || !tcpFailed || got[2] != "udp/answer" {
					t.Fatalf("attempts %v, want TC, a TCP failure, then the second server", got)
				}
			} else if !equalStrings(got, c.outcomes) {
				t.Fatalf("attempts %v, want %v", got, c.outcomes)
			}
			if res.Result != engine.ResultAnswer {
				t.Fatalf("result %v", res.Result)
			}
			if c.name == "TC then TCP" && len(res.Msg.Answer) != 20 {
				t.Fatalf("%d TXT records over TCP, want 20", len(res.Msg.Answer))
			}
			if strings.Contains(c.name, "then right") {
				if a := res.Msg.Answer[0].(*dns.A).A.String(); a != "192.0.2.1" || e.Counters().MismatchedReplies != 1 {
					t.Fatalf("answer %s, mismatched %d; want the right reply used, one ignored", a, e.Counters().MismatchedReplies)
				}
			}
			for _, q := range first.Queries() {
				if q.Msg != nil && (q.Msg.IsEdns0() == nil || q.Msg.IsEdns0().UDPSize() != 1232) {
					t.Fatalf("upstream query without EDNS0 1232: %v", q.Msg)
				}
			}
		})
	}
}

// A closed port answers a UDP query with ICMP port-unreachable; the
// connected socket reports it as a refusal at once, long before the
// timeout.
func TestIntegrationClosedPort(t *testing.T) {
	t.Parallel()
	closed := upstreamtest.ClosedPort(t)
	good := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.2"))
	e, log := realEngine(t, 30*time.Second, closed.String(), good.String())
	start := time.Now()
	res := realAsk(t, e, "www.example.", dns.TypeA)
	if got := log.outcomes(); !equalStrings(got, []string{"udp/recv_error", "udp/answer"}) {
		t.Fatalf("attempts %v, want the refusal then the answer", got)
	}
	if res.Result != engine.ResultAnswer || time.Since(start) > 10*time.Second {
		t.Fatalf("%v after %v: the refusal waited for the 30s timeout", res.Result, time.Since(start))
	}
	if c := e.Counters(); c.UpstreamFailed != 1 {
		t.Fatalf("upstream_failed %d", c.UpstreamFailed)
	}
}

func TestIntegrationTCPConnectRefused(t *testing.T) {
	t.Parallel()
	// UDP answers with TC; nothing listens for TCP on that port.
	udpOnly := upstreamtest.Start(t, upstreamtest.Truncated())
	udpOnly.CloseTCP()
	good := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.2"))
	e, log := realEngine(t, 5*time.Second, udpOnly.String(), good.String())
	res := realAsk(t, e, "www.example.", dns.TypeA)
	if got := log.outcomes(); !equalStrings(got, []string{"udp/truncated", "tcp/connect_error", "udp/answer"}) || res.Result != engine.ResultAnswer {
		t.Fatalf("attempts %v result %v", got, res.Result)
	}
}
