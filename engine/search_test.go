package engine_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/enginetest"
	"github.com/dohfwd/dohfwd/engine/memnet"
	"github.com/miekg/dns"
)

// searchServer is the memnet address of the one server in searchConfig.
var searchServer = netip.MustParseAddrPort("127.0.2.1:53")

// searchConfig is one default-route scope on searchServer with the given
// search domains.
func searchConfig(search ...string) engine.Config {
	return engine.Config{Scopes: []engine.ScopeConfig{{
		Name: "lan", DefaultRoute: true, Servers: []string{searchServer.String()}, Search: search,
	}}}
}

// startEngine builds an engine on nw or fails the test.
func startEngine(t *testing.T, cfg engine.Config, nw engine.Network) *engine.Engine {
	t.Helper()
	e, err := engine.New(cfg, engine.Options{Network: nw})
	if err != nil {
		t.Fatalf("engine.New: %v", err)
	}
	return e
}

// queryFor is a client query for name with EDNS0, as DoH clients send.
func queryFor(name string, qtype uint16) *dns.Msg {
	q := new(dns.Msg)
	q.SetQuestion(name, qtype)
	q.Id = 0xbeef
	q.SetEdns0(1232, false)
	return q
}

// zoneHandler answers from a tiny zone: names (lowercased) in answers get
// an A record with ttl; every other name NXDOMAIN with a SOA.
func zoneHandler(ttl uint32, answers ...string) memnet.Handler {
	return memnet.Respond(memnet.Reply{Msg: func(q *dns.Msg) *dns.Msg {
		m := new(dns.Msg)
		m.SetReply(q)
		name := q.Question[0].Name
		for _, a := range answers {
			if strings.EqualFold(a, name) {
				m.Answer = append(m.Answer, &dns.A{
					Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl},
					A:   []byte{192, 0, 2, 7},
				})
				return m
			}
		}
		m.Rcode = dns.RcodeNameError
		m.Ns = append(m.Ns, testSOA("example.", 300, 60))
		return m
	}})
}

func testSOA(zone string, ttl, minimum uint32) *dns.SOA {
	return &dns.SOA{
		Hdr: dns.RR_Header{Name: zone, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: ttl},
		Ns:  "ns." + zone, Mbox: "hostmaster." + zone, Serial: 1, Refresh: 3600, Retry: 600, Expire: 86400, Minttl: minimum,
	}
}

func askedNames(nw *memnet.Network) []string {
	var names []string
	for _, tx := range nw.Transactions() {
		if tx.Query != nil {
			names = append(names, tx.Query.Question[0].Name)
		}
	}
	return names
}

func TestSearchEveryCandidateAskedWhenAllNXDOMAIN(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New()
		nw.Handle(searchServer, zoneHandler(60))
		search := []string{"a.example", "b.example", "c.example", "d.example", "e.example", "f.example", "g.example"}
		e := startEngine(t, searchConfig(search...), nw)
		r := enginetest.Resolve(e, context.Background(), queryFor("printer.", dns.TypeA))
		want := []string{"printer.a.example.", "printer.b.example.", "printer.c.example.", "printer.d.example.",
			"printer.e.example.", "printer.f.example.", "printer.g.example.", "printer."}
		if got := askedNames(nw); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("asked %v\nwant every candidate in order %v", got, want)
		}
		if r.Result != engine.ResultNXDomain || r.Msg.Rcode != dns.RcodeNameError {
			t.Fatalf("result %v rcode %d, want nxdomain after the last candidate", r.Result, r.Msg.Rcode)
		}
		if r.Msg.Question[0].Name != "printer." || r.Msg.Id != 0xbeef {
			t.Fatalf("reply question %q id %#x, want the client's", r.Msg.Question[0].Name, r.Msg.Id)
		}
		if r.Attempts > 1 {
			t.Fatalf("%d attempts spent; NXDOMAIN that moves on spends none", r.Attempts)
		}
	})
}

func TestSearchFailuresShareThreeAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New()
		// Each candidate times out once, then gets NXDOMAIN: the question
		// runs out of attempts on the third failure, whatever the
		// candidate.
		perName := map[string]int{}
		nw.Handle(searchServer, func(memnet.Conn) memnet.Action {
			return memnet.Action{Replies: []memnet.Reply{{Msg: func(q *dns.Msg) *dns.Msg {
				name := q.Question[0].Name
				perName[name]++
				m := new(dns.Msg)
				m.SetReply(q)
				if perName[name] == 1 {
					m.Rcode = dns.RcodeServerFailure
				} else {
					m.Rcode = dns.RcodeNameError
				}
				return m
			}}}}
		})
		e := startEngine(t, searchConfig("a.example", "b.example", "c.example", "d.example"), nw)
		r := enginetest.Resolve(e, context.Background(), queryFor("printer.", dns.TypeA))
		want := []string{"printer.a.example.", "printer.a.example.", "printer.b.example.", "printer.b.example.", "printer.c.example."}
		if got := askedNames(nw); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("asked %v\nwant %v (three failures in all, NXDOMAINs free)", got, want)
		}
		if r.Result != engine.ResultUnavailable || r.Reason != engine.ReasonAttemptsSpent || r.Attempts != 3 {
			t.Fatalf("result %v (%v), %d attempts; want unavailable after 3", r.Result, r.Reason, r.Attempts)
		}
		if c := e.Counters(); c.UpstreamFailed != 3 {
			t.Fatalf("upstream_failed %d, want 3", c.UpstreamFailed)
		}
	})
}

func TestSearchAnswerIsCNAMEToCandidate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New()
		nw.Handle(searchServer, zoneHandler(120, "printer.b.example."))
		e := startEngine(t, searchConfig("a.example", "b.example"), nw)
		r := enginetest.Resolve(e, context.Background(), queryFor("Printer.", dns.TypeA))
		if r.Result != engine.ResultAnswer {
			t.Fatalf("result %v, want answer", r.Result)
		}
		if r.Msg.Question[0].Name != "Printer." {
			t.Fatalf("question %q, want the client's", r.Msg.Question[0].Name)
		}
		if len(r.Msg.Answer) != 2 {
			t.Fatalf("answer %v, want CNAME then A", r.Msg.Answer)
		}
		cname, ok := r.Msg.Answer[0].(*dns.CNAME)
		if !ok || cname.Hdr.Name != "Printer." || !strings.EqualFold(cname.Target, "printer.b.example.") || cname.Hdr.Ttl != 120 {
			t.Fatalf("first record %v, want Printer. CNAME printer.b.example. with the A's TTL", r.Msg.Answer[0])
		}
		a, ok := r.Msg.Answer[1].(*dns.A)
		if !ok || !strings.EqualFold(a.Hdr.Name, "printer.b.example.") || a.A.String() != "192.0.2.7" {
			t.Fatalf("second record %v, want the candidate's A", r.Msg.Answer[1])
		}
		if _, err := r.Msg.Pack(); err != nil {
			t.Fatalf("reply does not pack: %v", err)
		}
	})
}

func TestSearchSkipsOverlongCandidates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New()
		nw.Handle(searchServer, zoneHandler(60))
		long := strings.Repeat(strings.Repeat("x", 60)+".", 4) // 244 octets
		e := startEngine(t, searchConfig(long, "ok.example"), nw)
		label := strings.Repeat("p", 20) + "."
		enginetest.Resolve(e, context.Background(), queryFor(label, dns.TypeA))
		want := []string{label + "ok.example.", label}
		if got := askedNames(nw); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("asked %v, want %v (the candidate over 255 octets skipped)", got, want)
		}
	})
}

func TestSearchOnlyForSingleLabelNames(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New()
		nw.Handle(searchServer, zoneHandler(60))
		e := startEngine(t, searchConfig("a.example"), nw)
		enginetest.Resolve(e, context.Background(), queryFor("printer.office.", dns.TypeA))
		if got := askedNames(nw); len(got) != 1 || got[0] != "printer.office." {
			t.Fatalf("asked %v, want the multi-label name as given only", got)
		}
	})
}

func TestSearchCachedCandidatesSpendNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New()
		nw.Handle(searchServer, zoneHandler(120, "printer.b.example."))
		cfg := searchConfig("a.example", "b.example")
		cfg.Cache.MaxEntries = 100
		e := startEngine(t, cfg, nw)
		first := enginetest.Resolve(e, context.Background(), queryFor("printer.", dns.TypeA))
		if n := len(nw.Transactions()); n != 2 || first.CacheHit {
			t.Fatalf("first question: %d transactions (cache hit %v), want 2 upstream", n, first.CacheHit)
		}
		time.Sleep(10 * time.Second)
		r := enginetest.Resolve(e, context.Background(), queryFor("printer.", dns.TypeA))
		if n := len(nw.Transactions()); n != 2 {
			t.Fatalf("second question sent %d more transactions, want none: both candidates are cached", n-2)
		}
		if !r.CacheHit || r.Result != engine.ResultLocal || r.Attempts != 0 {
			t.Fatalf("cache hit %v result %v attempts %d; want a hit, local, 0", r.CacheHit, r.Result, r.Attempts)
		}
		if len(r.Msg.Answer) != 2 || r.Msg.Answer[0].Header().Rrtype != dns.TypeCNAME || r.Msg.Answer[1].Header().Ttl != 110 {
			t.Fatalf("answer %v, want the CNAME and the A counted down to 110", r.Msg.Answer)
		}
		if c := e.Counters(); c.CacheHits != 1 {
			t.Fatalf("cache_hits %d, want 1", c.CacheHits)
		}
	})
}

func netip4(a, b, c, d byte) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{a, b, c, d}), 53)
}
