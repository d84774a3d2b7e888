package engine

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

func routingTable(t *testing.T, cfg Config) *routes {
	t.Helper()
	r, err := buildRoutes(cfg.withDefaults(), newUpstream)
	if err != nil {
		t.Fatalf("buildRoutes: %v", err)
	}
	return r
}

func TestRoutingLongestSuffix(t *testing.T) {
	r := routingTable(t, Config{
		Scopes: []ScopeConfig{
			{Name: "corp", Domains: []string{"corp.example"}, Servers: []string{"127.0.0.10"}},
			{Name: "lab", Domains: []string{"lab.corp.example."}, Servers: []string{"127.0.0.11"}},
			{Name: "corp-again", Domains: []string{"CORP.example."}, Servers: []string{"127.0.0.12"}},
			{Name: "idn", Domains: []string{"Bücher.Example"}, Servers: []string{"127.0.0.13"}},
			{Name: "empty", Domains: []string{"empty.example"}},
			{Name: "default-empty", DefaultRoute: true},
			{Name: "default", DefaultRoute: true, Servers: []string{"127.0.0.14"}},
			{Name: "default-later", DefaultRoute: true, Servers: []string{"127.0.0.15"}},
			{Name: "reverse", Domains: []string{"10.in-addr.arpa"}, Servers: []string{"127.0.0.16"}},
		},
		FallbackServers: []string{"127.0.0.53"},
	})
	for _, c := range []struct{ name, scope string }{
		{"corp.example.", "corp"},
		{"host.corp.example.", "corp"},
		{"HOST.Corp.EXAMPLE.", "corp"},            // case-insensitive; ties go to the first scope
		{"host.corp.example", "corp"},             // no trailing dot
		{"a.lab.corp.example.", "lab"},            // longest suffix wins
		{"lab.corp.example.", "lab"},              //
		{"xlab.corp.example.", "corp"},            // label-wise, not by characters
		{"notcorp.example.", "default"},           // ...
		{"xn--bcher-kva.example.", "idn"},         // IDN configured in Unicode, asked in punycode
		{"www.XN--BCHER-KVA.example.", "idn"},     //
		{"empty.example.", "empty"},               // routed to a scope without servers: no fall-through
		{"1.2.3.10.in-addr.arpa.", "reverse"},     //
		{"example.org.", "default"},               // first default-route scope with servers
		{".", "default"},                          //
		{"corp.example.evil.", "default"},         // a suffix, not a substring
		{"10.in-addr.arpa.example.", "default"},   //
		{"lab.corp.example.org.", "default"},      //
		{"sub.empty.example.", "empty"},           //
		{"xn--bcher-kva.example.org.", "default"}, //
	} {
		if got := r.route(c.name).name; got != c.scope {
			t.Errorf("route(%q) = %q, want %q", c.name, got, c.scope)
		}
	}
}

func TestRoutingFallbackWithoutDefaultRoute(t *testing.T) {
	r := routingTable(t, Config{
		Scopes: []ScopeConfig{
			{Name: "corp", Domains: []string{"corp.example"}, Servers: []string{"127.0.0.10"}},
			{Name: "default-empty", DefaultRoute: true},
		},
		FallbackServers: []string{"127.0.0.53"},
	})
	if got := r.route("example.org.").name; got != FallbackScope {
		t.Fatalf("route = %q, want the fallback servers", got)
	}
	if got := r.route("www.corp.example.").name; got != "corp" {
		t.Fatalf("route = %q, want corp", got)
	}
}

func TestRoutingRejectsBadNames(t *testing.T) {
	for _, sc := range []ScopeConfig{
		{Name: "a", Domains: []string{"a..b"}},
		{Name: "a", Domains: []string{""}},
		{Name: "a", Search: []string{"."}},
		{Name: "a", Domains: []string{"bad\u00a0space.example"}},
		{Name: "a", SourcesV4: []string{"::1"}},
		{Name: "a", SourcesV6: []string{"127.0.0.1"}},
	} {
		if _, err := buildRoutes(Config{Scopes: []ScopeConfig{sc}}.withDefaults(), newUpstream); err == nil {
			t.Errorf("scope %+v accepted", sc)
		}
	}
}

// A scope with no servers answers at once, before the ceiling is looked
// at, and is not a refusal.
func TestRoutingNoServersUnavailableBeforeCeiling(t *testing.T) {
	e, err := New(Config{
		Scopes:          []ScopeConfig{{Name: "dark", Domains: []string{"dark.example"}}},
		FallbackServers: []string{"127.0.0.53"},
		InFlightCeiling: 4,
	}, Options{Network: NativeNetwork{}})
	if err != nil {
		t.Fatal(err)
	}
	e.inFlight.n.Store(4) // the ceiling is reached
	defer e.inFlight.n.Store(0)
	q := new(dns.Msg)
	q.SetQuestion("host.dark.example.", dns.TypeA)
	raw, err := q.Pack()
	if err != nil {
		t.Fatal(err)
	}
	r := e.Resolve(context.Background(), raw, nil)
	reply := new(dns.Msg)
	if err := reply.Unpack(r.Wire); err != nil {
		t.Fatal(err)
	}
	if r.Result != ResultUnavailable || r.Reason != ReasonNoServers || r.Scope != "dark" || r.Attempts != 0 {
		t.Fatalf("%v (%v) in scope %q after %d attempts, want unavailable for no servers in dark, 0 attempts", r.Result, r.Reason, r.Scope, r.Attempts)
	}
	if reply.Rcode != dns.RcodeServerFailure {
		t.Fatalf("rcode %d, want SERVFAIL", reply.Rcode)
	}
	var ede *dns.EDNS0_EDE
	if opt := reply.IsEdns0(); opt != nil {
		for _, o := range opt.Option {
			if x, ok := o.(*dns.EDNS0_EDE); ok {
				ede = x
			}
		}
	}
	if ede == nil || ede.InfoCode != dns.ExtendedErrorCodeNoReachableAuthority || ede.ExtraText != "no servers" {
		t.Fatalf("EDE %v, want 22 \"no servers\"", ede)
	}
	if c := e.Counters(); c.Refused != 0 {
		t.Fatalf("refused %d, want 0", c.Refused)
	}
}

func TestEgressSourceRoundRobinPerFamily(t *testing.T) {
	r := routingTable(t, Config{Scopes: []ScopeConfig{{Name: "s", DefaultRoute: true, Servers: []string{"127.0.0.1"},
		SourcesV4: []string{"127.0.0.2", "127.0.0.3"}, SourcesV6: []string{"::1"}}}})
	s := r.scopes[0]
	v4, v6 := netip.MustParseAddrPort("127.0.0.1:53"), netip.MustParseAddrPort("[::1]:53")
	var got []string
	for _, server := range []netip.AddrPort{v4, v6, v4, v6, v4} {
		got = append(got, s.source(server).String())
	}
	// Asking a v6 server does not move the v4 rotation.
	want := "127.0.0.2 ::1 127.0.0.3 ::1 127.0.0.2"
	if g := strings.Join(got, " "); g != want {
		t.Fatalf("sources %s, want %s", g, want)
	}
	if r.fallback.source(v4).IsValid() {
		t.Fatal("the fallback servers got an egress source: the system should choose")
	}
}
