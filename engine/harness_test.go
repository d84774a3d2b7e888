package engine_test

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/enginetest"
	"github.com/dohfwd/dohfwd/engine/memnet"
	"github.com/miekg/dns"
)

// rig is an engine over an in-memory network, with its events recorded.
// Build it inside a synctest bubble so the engine's clock is the bubble's.
type rig struct {
	t   *testing.T
	net *memnet.Network
	e   *engine.Engine
	log *eventLog
	// bg holds questions started in the background; the test waits for
	// them at its end, inside the bubble.
	bg sync.WaitGroup
}

func newRig(t *testing.T, cfg engine.Config) *rig {
	t.Helper()
	r := &rig{t: t, net: memnet.New(), log: &eventLog{}}
	e, err := engine.New(cfg, engine.Options{Network: r.net, Observer: r.log})
	if err != nil {
		t.Fatalf("engine.New: %v", err)
	}
	r.e = e
	t.Cleanup(r.bg.Wait)
	return r
}

// rigServer is the i-th test server's address. memnet never sends a
// packet, but the addresses are loopback anyway.
func rigServer(i int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 1, byte(i)}), 53)
}

// rigScope is a configuration with one default-route scope "main" whose
// servers are rigServer(1..n).
func rigScope(n int) engine.Config {
	sc := engine.ScopeConfig{Name: "main", DefaultRoute: true}
	for i := 1; i <= n; i++ {
		sc.Servers = append(sc.Servers, rigServer(i).String())
	}
	return engine.Config{Scopes: []engine.ScopeConfig{sc}}
}

func newQuery(name string, qtype uint16) *dns.Msg {
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), qtype)
	return q
}

// ask resolves name/A with no client deadline.
func (r *rig) ask(name string) enginetest.Response {
	return enginetest.Resolve(r.e, context.Background(), newQuery(name, dns.TypeA))
}

// servers returns the server of each recorded transaction, in order.
func (r *rig) servers() []netip.AddrPort {
	var out []netip.AddrPort
	for _, tx := range r.net.Transactions() {
		out = append(out, tx.Server)
	}
	return out
}

// demoted reports whether scope "main" lists addr as demoted now.
func (r *rig) demoted(addr netip.AddrPort) bool {
	for _, s := range r.e.Status().Scopes {
		for _, sv := range s.Servers {
			if sv.Address == addr.String() {
				return sv.Demoted
			}
		}
	}
	r.t.Fatalf("no server %v in status", addr)
	return false
}

// demotedUntil is the end of addr's mark in scope "main"'s status.
func (r *rig) demotedUntil(addr netip.AddrPort) time.Time {
	for _, s := range r.e.Status().Scopes {
		for _, sv := range s.Servers {
			if sv.Address == addr.String() && sv.DemotedUntil != nil {
				return *sv.DemotedUntil
			}
		}
	}
	return time.Time{}
}

// eventLog records the engine's events; onAttempt, when set, runs inside
// each Attempt call (the engine calls it on the question's goroutine).
type eventLog struct {
	mu        sync.Mutex
	attempts  []engine.AttemptEvent
	questions []engine.QuestionEvent
	onAttempt func(engine.AttemptEvent)
}

func (l *eventLog) Attempt(ev engine.AttemptEvent) {
	l.mu.Lock()
	l.attempts = append(l.attempts, ev)
	f := l.onAttempt
	l.mu.Unlock()
	if f != nil {
		f(ev)
	}
}

func (l *eventLog) Question(ev engine.QuestionEvent) {
	l.mu.Lock()
	l.questions = append(l.questions, ev)
	l.mu.Unlock()
}

func (l *eventLog) outcomes() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, a := range l.attempts {
		out = append(out, fmt.Sprintf("%s/%s", a.Transport, a.Outcome))
	}
	return out
}

func (l *eventLog) attemptList() []engine.AttemptEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]engine.AttemptEvent(nil), l.attempts...)
}

func (l *eventLog) questionList() []engine.QuestionEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]engine.QuestionEvent(nil), l.questions...)
}

func equalAddrs(a, b []netip.AddrPort) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func equalStrings(a, b []string) bool {
	return fmt.Sprint(a) == fmt.Sprint(b)
}
