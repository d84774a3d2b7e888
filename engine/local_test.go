package engine_test

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/enginetest"
	"github.com/dohfwd/dohfwd/engine/memnet"
	"github.com/miekg/dns"
)

// localCase is one question with the records (presentation text, TTL
// left out) and rcode it must get locally.
type localCase struct {
	name  string
	qtype uint16
	rcode int
	want  []string
}

var localCases = []localCase{
	{"localhost.", dns.TypeA, dns.RcodeSuccess, []string{"localhost. IN A 127.0.0.1"}},
	{"localhost.", dns.TypeAAAA, dns.RcodeSuccess, []string{"localhost. IN AAAA ::1"}},
	{"LocalHost.", dns.TypeA, dns.RcodeSuccess, []string{"LocalHost. IN A 127.0.0.1"}},
	{"app.dev.localhost.", dns.TypeA, dns.RcodeSuccess, []string{"app.dev.localhost. IN A 127.0.0.1"}},
	{"localhost.", dns.TypeMX, dns.RcodeSuccess, nil}, // NODATA
	{"1.0.0.127.in-addr.arpa.", dns.TypePTR, dns.RcodeSuccess, []string{"1.0.0.127.in-addr.arpa. IN PTR localhost."}},
	{"1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.ip6.arpa.", dns.TypePTR, dns.RcodeSuccess,
		[]string{"1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.ip6.arpa. IN PTR localhost."}},
	{"invalid.", dns.TypeA, dns.RcodeNameError, nil},
	{"x.y.INVALID.", dns.TypeAAAA, dns.RcodeNameError, nil},
	// Static hosts.
	{"router.lan.", dns.TypeA, dns.RcodeSuccess, []string{"router.lan. IN A 192.168.1.1"}},
	{"Router.LAN.", dns.TypeAAAA, dns.RcodeSuccess, []string{"Router.LAN. IN AAAA fd00::1"}},
	{"router.lan.", dns.TypeTXT, dns.RcodeSuccess, nil}, // NODATA: the name is the operator's
	{"v4only.lan.", dns.TypeAAAA, dns.RcodeSuccess, nil},
	{"1.1.168.192.in-addr.arpa.", dns.TypePTR, dns.RcodeSuccess,
		[]string{"1.1.168.192.in-addr.arpa. IN PTR gw.lan.", "1.1.168.192.in-addr.arpa. IN PTR router.lan."}},
	{"xn--bcher-kva.lan.", dns.TypeA, dns.RcodeSuccess, []string{"xn--bcher-kva.lan. IN A 192.168.1.9"}},
}

// localConfig routes everything to a silent memnet server, so only a
// local answer can answer, and has static hosts.
func localConfig() engine.Config {
	cfg := searchConfig()
	cfg.Hosts = map[string][]string{
		"router.lan":   {"192.168.1.1", "fd00::1"},
		"GW.lan.":      {"192.168.1.1"},
		"v4only.lan":   {"192.168.1.2"},
		"bücher.lan":   {"192.168.1.9"},
		"other.lan":    {},
		"printer":      {"192.168.1.3"},
		"example.test": {"::ffff:192.168.1.4"}, // mapped: stored as IPv4
	}
	return cfg
}

func checkLocal(t *testing.T, e *engine.Engine, c localCase) {
	t.Helper()
	q := queryFor(c.name, c.qtype)
	r := enginetest.Resolve(e, context.Background(), q)
	if r.Result != engine.ResultLocal || r.Attempts != 0 || r.CacheHit {
		t.Fatalf("%s %s: result %v, %d attempts, cache hit %v; want local, 0, no", c.name, dns.TypeToString[c.qtype], r.Result, r.Attempts, r.CacheHit)
	}
	if r.Msg.Rcode != c.rcode || r.Msg.Id != q.Id || r.Msg.Question[0] != q.Question[0] {
		t.Fatalf("%s %s: rcode %d id %#x question %v; want rcode %d and the client's id and question", c.name, dns.TypeToString[c.qtype], r.Msg.Rcode, r.Msg.Id, r.Msg.Question[0], c.rcode)
	}
	var got []string
	for _, rr := range r.Msg.Answer {
		s := strings.Replace(rr.String(), "\t60\t", " ", 1)
		got = append(got, strings.ReplaceAll(s, "\t", " "))
	}
	if strings.Join(got, "|") != strings.Join(c.want, "|") {
		t.Fatalf("%s %s: answer %q, want %q", c.name, dns.TypeToString[c.qtype], got, c.want)
	}
	if r.Msg.IsEdns0() == nil {
		t.Fatalf("%s: the client sent EDNS0 and got no OPT back", c.name)
	}
}

func TestLocalAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New()
		e := startEngine(t, localConfig(), nw)
		for _, c := range localCases {
			checkLocal(t, e, c)
		}
		if n := len(nw.Transactions()); n != 0 {
			t.Fatalf("%d upstream transactions for local names, want none", n)
		}
	})
}

// engine-servers.local-answers-unaffected-by-ceiling
func TestLocalAnswersAtFullCeiling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New() // the server never answers: the slot stays taken
		cfg := localConfig()
		cfg.InFlightCeiling = 1
		e := startEngine(t, cfg, nw)
		slow := make(chan enginetest.Response)
		go func() { slow <- enginetest.Resolve(e, context.Background(), queryFor("slow.example.", dns.TypeA)) }()
		synctest.Wait()
		if e.InFlight() != 1 {
			t.Fatalf("in flight %d, want the ceiling (1) reached", e.InFlight())
		}
		if r := enginetest.Resolve(e, context.Background(), queryFor("upstream.example.", dns.TypeA)); r.Reason != engine.ReasonInFlightCeiling {
			t.Fatalf("an upstream question got %v (%v): the ceiling is not full", r.Result, r.Reason)
		}
		for _, c := range localCases {
			checkLocal(t, e, c)
		}
		if n := len(nw.Transactions()); n != 1 {
			t.Fatalf("%d transactions, want only the slow question's", n)
		}
		if c := e.Counters(); c.Refused != 1 {
			t.Fatalf("refused %d, want 1 (the upstream question only)", c.Refused)
		}
		if r := <-slow; r.Result != engine.ResultUnavailable {
			t.Fatalf("the slow question got %v, want unavailable after its attempts", r.Result)
		}
	})
}

func TestLocalHostsBeforeSearch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New()
		cfg := localConfig()
		cfg.Scopes[0].Search = []string{"corp.example"}
		e := startEngine(t, cfg, nw)
		checkLocal(t, e, localCase{"printer.", dns.TypeA, dns.RcodeSuccess, []string{"printer. IN A 192.168.1.3"}})
		// A search candidate that is a hosts name is answered locally too,
		// through the CNAME.
		cfg.Hosts = map[string][]string{"nas.corp.example": {"192.168.1.5"}}
		if err := e.Reconfigure(cfg); err != nil {
			t.Fatal(err)
		}
		r := enginetest.Resolve(e, context.Background(), queryFor("nas.", dns.TypeA))
		if r.Result != engine.ResultLocal || len(r.Msg.Answer) != 2 || r.Msg.Answer[0].(*dns.CNAME).Target != "nas.corp.example." {
			t.Fatalf("result %v answer %v; want a local CNAME to nas.corp.example. and its A", r.Result, r.Msg.Answer)
		}
		if n := len(nw.Transactions()); n != 0 {
			t.Fatalf("%d upstream transactions, want none", n)
		}
	})
}

func TestLocalHostsRejectsBadEntries(t *testing.T) {
	for name, hosts := range map[string]map[string][]string{
		"bad address": {"router.lan": {"192.168.1.300"}},
		"zone":        {"router.lan": {"fe80::1%eth0"}},
		"bad name":    {"a..b": {"192.168.1.1"}},
		"root":        {".": {"192.168.1.1"}},
	} {
		cfg := searchConfig()
		cfg.Hosts = hosts
		if _, err := engine.New(cfg, engine.Options{Network: memnet.New()}); err == nil || !strings.Contains(err.Error(), "hosts") {
			t.Errorf("%s: error %v, want one naming hosts", name, err)
		}
	}
}
