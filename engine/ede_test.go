package engine_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/enginetest"
	"github.com/dohfwd/dohfwd/engine/memnet"
	"github.com/miekg/dns"
)

// threeFailures is a scope whose servers fail each in its own way: a
// timeout, a SERVFAIL, a refused port.
func threeFailures(r *rig) {
	r.net.Handle(rigServer(1), memnet.Silent())
	r.net.Handle(rigServer(2), memnet.Respond(memnet.Rcode(dns.RcodeServerFailure)))
	r.net.Handle(rigServer(3), memnet.Fail("receive", engine.ErrRefused))
}

// An unavailable answer's EDE keeps its info-code and names each attempt
// in order: server, transport, outcome.
func TestEDENamesEachAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigScope(3))
		threeFailures(r)
		q := newQuery("x.example.", dns.TypeA)
		q.SetEdns0(1232, false)
		res := enginetest.Resolve(r.e, context.Background(), q)
		if res.Result != engine.ResultUnavailable || edeCode(res.Msg) != int(dns.ExtendedErrorCodeNoReachableAuthority) {
			t.Fatalf("result %v EDE %d", res.Result, edeCode(res.Msg))
		}
		want := rigServer(1).String() + "/udp timeout; " + rigServer(2).String() + "/udp SERVFAIL; " + rigServer(3).String() + "/udp refused"
		if got := edeText(res.Msg); got != want {
			t.Fatalf("EDE text %q, want %q", got, want)
		}
		if res.Upstream != 2*time.Second {
			t.Fatalf("upstream time %v, want the timeout's 2 s", res.Upstream)
		}
	})
}

// The list fits the message size the client can take: attempts that do
// not fit are counted, not cut in half; a client without EDNS takes 512.
func TestEDEFitsTheClientsSize(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := rigScope(3)
		cfg.Attempts = 30
		r := newRig(t, cfg)
		threeFailures(r)
		res := r.ask("a-long-name-to-leave-less-room-for-the-list.example.")
		text := edeText(res.Msg)
		if !strings.HasSuffix(text, " more") || !strings.HasPrefix(text, rigServer(1).String()+"/udp timeout; ") {
			t.Fatalf("EDE text %q, want the first attempts and a count of the rest", text)
		}
		if n := res.Msg.Len(); n > 512 {
			t.Fatalf("reply is %d bytes, the client takes 512", n)
		}
		for _, part := range strings.Split(strings.TrimSuffix(text, "; "), "; ") {
			if !strings.HasPrefix(part, "127.0.1.") && !strings.HasPrefix(part, "+") {
				t.Fatalf("part %q of %q is cut", part, text)
			}
		}
	})
}

// ede_hide_servers leaves the list out; the info-code and the reason stay.
func TestEDEHideServers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := rigScope(3)
		cfg.EDEHideServers = true
		cfg.QuestionTimeout = time.Second
		r := newRig(t, cfg)
		threeFailures(r)
		res := r.ask("x.example.")
		if edeCode(res.Msg) != int(dns.ExtendedErrorCodeNoReachableAuthority) || edeText(res.Msg) != "question timeout" {
			t.Fatalf("EDE %d %q, want 22 \"question timeout\" and no servers", edeCode(res.Msg), edeText(res.Msg))
		}
		cfg.EDEHideServers = false
		r.e.Reconfigure(cfg)
		res = r.ask("y.example.")
		if want := "question timeout: " + rigServer(1).String() + "/udp cancelled"; edeText(res.Msg) != want {
			t.Fatalf("EDE %q, want %q", edeText(res.Msg), want)
		}
	})
}

// A question that waited for an identical one gets the attempts that
// question made.
func TestEDEOfCoalescedQuestion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := rigScope(3)
		cfg.Cache.MaxEntries = 100
		r := newRig(t, cfg)
		threeFailures(r)
		var wg sync.WaitGroup
		texts := make([]string, 3)
		for i := range texts {
			wg.Go(func() { texts[i] = edeText(r.ask("same.example.").Msg) })
		}
		wg.Wait()
		if n := len(r.net.Transactions()); n != 3 {
			t.Fatalf("%d transactions, want one question's 3", n)
		}
		for _, s := range texts {
			if s != texts[0] || !strings.Contains(s, "/udp SERVFAIL") {
				t.Fatalf("EDE texts %q, want the same list for all", texts)
			}
		}
	})
}
