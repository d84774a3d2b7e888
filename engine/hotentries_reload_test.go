package engine_test

import (
	"context"
	"net/netip"
	"testing"
	"testing/synctest"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/memnet"
	"github.com/miekg/dns"
)

// A question read under the old configuration that resolves after
// a reload hits the old cache and publishes the entry (the old routes'
// generation); the mirror, reconfigured to the new configuration, takes
// it and would serve the old servers' answer, which the engine does not:
// an entry is published only under the routes the engine runs now.
func TestHotEntriesTakesNoEntryOfTheRoutesBeforeAReload(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		oldServer, newServer := netip.MustParseAddrPort("127.0.9.1:53"), netip.MustParseAddrPort("127.0.9.2:53")
		cfgWith := func(server netip.AddrPort) engine.Config {
			return engine.Config{Cache: engine.CacheConfig{MaxEntries: 1000}, Scopes: []engine.ScopeConfig{{
				Name: "lan", DefaultRoute: true, Servers: []string{server.String()}, Search: []string{"a.test."}}}}
		}
		// How many asks publish "foo.a.test." (a twin engine).
		n := 0
		{
			nw := memnet.New()
			nw.Handle(oldServer, memnet.Respond(memnet.Answer("@ 300 IN A 192.0.2.1")))
			e := startEngine(t, cfgWith(oldServer), nw)
			published := false
			e.PublishHotEntries(func([]byte) { published = true })
			q := pack(t, queryFor("foo.a.test.", dns.TypeA))
			for !published {
				if _, ok := e.AnswerNow(q, nil, nil, nil); !ok {
					e.Resolve(context.Background(), q, nil)
				}
				n++
			}
		}
		nw := memnet.New()
		nw.Handle(oldServer, memnet.Respond(memnet.Answer("@ 300 IN A 192.0.2.1")))
		nw.Handle(newServer, memnet.Respond(memnet.Answer("@ 300 IN A 198.51.100.1")))
		e := startEngine(t, cfgWith(oldServer), nw)
		m, err := engine.NewHotEntries(cfgWith(oldServer), nil)
		if err != nil {
			t.Fatal(err)
		}
		e.PublishHotEntries(func(rec []byte) {
			if err := m.Publish(rec); err != nil {
				t.Error(err)
			}
		})
		direct := pack(t, queryFor("foo.a.test.", dns.TypeA))
		for range n - 1 {
			if _, ok := e.AnswerNow(direct, nil, nil, nil); !ok {
				e.Resolve(context.Background(), direct, nil)
			}
		}
		// A one-label question: never at once (search), read under the old
		// configuration into its Miss.
		var miss engine.Miss
		short := pack(t, queryFor("foo.", dns.TypeA))
		if _, ok := e.AnswerNow(short, nil, nil, &miss); ok || !miss.Ready() {
			t.Fatal("the one-label question was answered at once")
		}
		// The reload, as the host runs it: mirror suspended, engine
		// reloaded (new servers: a fresh cache), mirror reconfigured.
		m.Suspend()
		if err := e.Reconfigure(cfgWith(newServer)); err != nil {
			t.Fatal(err)
		}
		if err := m.Reconfigure(cfgWith(newServer)); err != nil {
			t.Fatal(err)
		}
		// The question read before the reload finishes now.
		e.ResolveMiss(context.Background(), &miss, nil)
		got, ok := m.AnswerNow(direct, nil, nil, nil)
		want := e.Resolve(context.Background(), direct, nil)
		wm, gm := new(dns.Msg), new(dns.Msg)
		if err := wm.Unpack(want.Wire); err != nil {
			t.Fatal(err)
		}
		if ok {
			if err := gm.Unpack(got.Wire); err != nil {
				t.Fatal(err)
			}
			t.Fatalf("after the reload the mirror serves %v; the engine answers %v", gm.Answer, wm.Answer)
		}
	})
}
