package engine_test

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/enginetest"
	"github.com/dohfwd/dohfwd/engine/memnet"
	"github.com/miekg/dns"
)

// Explain names the server the next question asks first, before and after
// a demotion, and the question then asks exactly that server: both come
// from the same rule functions.
func TestExplainAgreesWithTheNextQuestion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigScope(3))
		r.net.Handle(rigServer(1), memnet.Respond(memnet.Rcode(dns.RcodeServerFailure)))
		r.net.Handle(rigServer(2), memnet.Respond(memnet.Answer("@ 60 IN A 192.0.2.2")))
		r.net.Handle(rigServer(3), memnet.Respond(memnet.Answer("@ 60 IN A 192.0.2.3")))

		x := enginetest.Explain(r.e, newQuery("a.example.", dns.TypeA))
		if x.Scope != "main" || x.Route != "default route" || x.Next != rigServer(1).String() {
			t.Fatalf("before: scope %q route %q next %q", x.Scope, x.Route, x.Next)
		}
		if len(r.net.Transactions()) != 0 {
			t.Fatal("Explain sent something upstream")
		}
		r.ask("a.example.") // server 1 fails and is demoted, server 2 answers
		if got := r.servers()[0]; got.String() != x.Next {
			t.Fatalf("question asked %v first, explain said %s", got, x.Next)
		}

		x = enginetest.Explain(r.e, newQuery("b.example.", dns.TypeA))
		order := []string{}
		for _, s := range x.Servers {
			order = append(order, s.Address)
		}
		want := []string{rigServer(2).String(), rigServer(3).String(), rigServer(1).String()}
		if !equalStrings(order, want) || x.Next != rigServer(2).String() {
			t.Fatalf("after demotion: order %v next %s, want %v next %v", order, x.Next, want, rigServer(2))
		}
		last := x.Servers[2]
		if !last.Demoted || last.DemotedUntil == nil || last.Remaining != 30 {
			t.Fatalf("demoted server: %+v, want demoted with 30 s left", last)
		}
		r.net.Reset()
		r.ask("b.example.")
		if got := r.servers()[0]; got.String() != x.Next {
			t.Fatalf("question asked %v first, explain said %s", got, x.Next)
		}
	})
}

// Explain tells the routing domain that chose the scope, the search
// candidates, the cache's entry with its remaining TTL and the ceiling.
func TestExplainRoutingSearchCacheCeiling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := rigScope(1)
		cfg.Scopes = append(cfg.Scopes, engine.ScopeConfig{Name: "corp", Domains: []string{"corp.example"},
			Servers: []string{rigServer(9).String()}, Search: []string{"corp.example"}})
		cfg.Cache.MaxEntries = 100
		r := newRig(t, cfg)
		r.net.Handle(rigServer(9), memnet.Respond(memnet.Answer("@ 60 IN A 192.0.2.9")))

		x := enginetest.Explain(r.e, newQuery("db.corp.example.", dns.TypeA))
		if x.Scope != "corp" || x.Route != "routing domain" || x.Domain != "corp.example." {
			t.Fatalf("scope %q route %q domain %q", x.Scope, x.Route, x.Domain)
		}
		x = enginetest.Explain(r.e, newQuery("printer.", dns.TypeA))
		if x.Scope != "main" || len(x.Candidates) != 1 {
			t.Fatalf("single label without search in scope main: %+v", x)
		}
		r.ask("db.corp.example.")
		time.Sleep(20 * time.Second)
		x = enginetest.Explain(r.e, newQuery("db.corp.example.", dns.TypeA))
		c := x.Candidates[0]
		if c.Cached != "answer" || c.TTLRemaining != 40 {
			t.Fatalf("cache: %+v, want answer with 40 s left", c)
		}
		if x.CeilingRefuses || x.InFlightCeiling != engine.DefaultInFlightCeiling {
			t.Fatalf("ceiling: refuses %v of %d", x.CeilingRefuses, x.InFlightCeiling)
		}
		x = enginetest.Explain(r.e, newQuery("localhost.", dns.TypeA))
		if !x.Local {
			t.Fatal("localhost. not explained as local")
		}
	})
}

// Explain lists a single-label name's search candidates in order, and
// says the ceiling refuses while it is full.
func TestExplainSearchCandidatesAndFullCeiling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := engine.Config{InFlightCeiling: 1, Scopes: []engine.ScopeConfig{{Name: "corp", DefaultRoute: true,
			Servers: []string{rigServer(1).String()}, Search: []string{"corp.example", "lab.example"}}}}
		r := newRig(t, cfg)
		r.net.Handle(rigServer(1), memnet.Silent())
		x := enginetest.Explain(r.e, newQuery("printer.", dns.TypeA))
		var names []string
		for _, c := range x.Candidates {
			names = append(names, c.Name)
		}
		if !equalStrings(names, []string{"printer.corp.example.", "printer.lab.example.", "printer."}) {
			t.Fatalf("candidates %v", names)
		}
		if x.CeilingRefuses {
			t.Fatal("empty ceiling said to refuse")
		}
		r.bg.Go(func() { r.ask("slow.example.") }) // holds the one slot for 2 s
		synctest.Wait()
		x = enginetest.Explain(r.e, newQuery("other.example.", dns.TypeA))
		if !x.CeilingRefuses || x.InFlight != 1 || !strings.Contains(x.Outcome, "ceiling") {
			t.Fatalf("full ceiling: refuses %v in flight %d outcome %q", x.CeilingRefuses, x.InFlight, x.Outcome)
		}
		if res := r.ask("other.example."); res.Reason != engine.ReasonInFlightCeiling {
			t.Fatalf("the question was not refused: %v", res.Reason)
		}
	})
}
