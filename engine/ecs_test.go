package engine_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/enginetest"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
	"github.com/miekg/dns"
)

// subnetServer answers with the query's ECS option echoed at scope
// prefix 24 for names under sub., 0 for the rest.
func subnetServer(q upstreamtest.Query) upstreamtest.Action {
	a := upstreamtest.Answer("@ 60 IN A 192.0.2.1")(q)
	if q.Msg == nil {
		return a
	}
	if s := subnetOf(q.Msg); s != nil {
		echo := *s
		echo.SourceScope = 0
		if strings.HasPrefix(strings.ToLower(q.Msg.Question[0].Name), "sub.") {
			echo.SourceScope = 24
		}
		o := a.Replies[0].Msg.IsEdns0()
		o.Option = append(o.Option, &echo)
	}
	return a
}

func subnetOf(m *dns.Msg) *dns.EDNS0_SUBNET {
	if o := m.IsEdns0(); o != nil {
		for _, opt := range o.Option {
			if s, ok := opt.(*dns.EDNS0_SUBNET); ok {
				return s
			}
		}
	}
	return nil
}

// With ecs add, the client's /24 goes upstream; the answer is cached for
// the scope prefix the server returned: a /24's answer serves that /24
// only, a scope prefix 0 answer every client.
func TestECSAddKeysOnScopePrefix(t *testing.T) {
	up := upstreamtest.Start(t, subnetServer)
	e, err := engine.New(engine.Config{TransactionTimeout: 2 * time.Second, Cache: engine.CacheConfig{MaxEntries: 100},
		Scopes: []engine.ScopeConfig{{Name: "main", DefaultRoute: true, Servers: []string{up.String()}, ECS: engine.ECSAdd}}},
		engine.Options{Network: engine.NativeNetwork{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	ask := func(client, name string) {
		t.Helper()
		ctx := engine.WithClient(context.Background(), netip.MustParseAddr(client))
		if r := enginetest.Resolve(e, ctx, newQuery(name, dns.TypeA)); r.Result != engine.ResultAnswer && r.Result != engine.ResultLocal {
			t.Fatalf("%s from %s: %v", name, client, r.Result)
		}
	}
	sent := func() []string {
		var out []string
		for _, q := range up.Queries() {
			s := "none"
			if e := subnetOf(q.Msg); e != nil {
				s = fmt.Sprintf("%s/%d", e.Address, e.SourceNetmask)
			}
			out = append(out, strings.ToLower(q.Msg.Question[0].Name)+" "+s)
		}
		return out
	}
	ask("192.0.2.10", "sub.example.test.")
	ask("192.0.2.77", "sub.example.test.")      // the same /24: from the cache
	ask("198.51.100.5", "sub.example.test.")    // another /24: asked again
	ask("192.0.2.10", "all.example.test.")      // scope 0
	ask("198.51.100.5", "all.example.test.")    // shared
	ask("2001:db8:1:2::1", "sub.example.test.") // IPv6: /56
	want := []string{
		"sub.example.test. 192.0.2.0/24",
		"sub.example.test. 198.51.100.0/24",
		"all.example.test. 192.0.2.0/24",
		"sub.example.test. 2001:db8:1::/56",
	}
	if got := sent(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("upstream queries:\n%v\nwant\n%v", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
