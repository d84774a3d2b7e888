package engine

import (
	"testing"
	"time"

	"github.com/miekg/dns"
)

// The mirror reads a question under the routes its entries were
// published under, held with them, not under whatever routes its engine
// value holds: here those route the name to another scope, as the next
// configuration's would for a reader that loaded the entries before a
// whole reload went by. Read under them, the entry's scope would not
// match and the hit would go to the module.
func TestHotEntriesReadsUnderItsEntriesRoutes(t *testing.T) {
	cache := CacheConfig{MaxEntries: 100}
	m, err := NewHotEntries(Config{FallbackServers: []string{"192.0.2.53:53"}, Cache: cache}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := m.cache.Load()
	scope := c.routes.route("x.example.").name

	reply := new(dns.Msg)
	reply.SetQuestion("x.example.", dns.TypeA)
	reply.Response = true
	rr, err := dns.NewRR("x.example. 60 IN A 192.0.2.1")
	if err != nil {
		t.Fatal(err)
	}
	reply.Answer = []dns.RR{rr}
	msg, err := reply.Pack()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	en := &entry{result: ResultAnswer, msg: msg, ttl: time.Minute, scope: scope, stored: now}
	key := cacheKey{name: "x.example.", qtype: dns.TypeA, qclass: dns.ClassINET}
	if err := m.Publish(appendHitRecord(nil, key, en, false, now)); err != nil {
		t.Fatal(err)
	}
	query, err := new(dns.Msg).SetQuestion("x.example.", dns.TypeA).Pack()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.AnswerNow(query, nil, nil, nil); !ok {
		t.Fatal("the mirror did not answer its published entry")
	}

	other, err := buildRoutes(Config{Scopes: []ScopeConfig{{Name: "corp", Domains: []string{"example."}, Servers: []string{"192.0.2.54:53"}}},
		FallbackServers: []string{"192.0.2.53:53"}, Cache: cache}.withDefaults(), newUpstream)
	if err != nil {
		t.Fatal(err)
	}
	if other.route("x.example.").name == scope {
		t.Fatalf("the other routes route x.example. to %q too: the test proves nothing", scope)
	}
	m.e.routes.Store(other)
	if _, ok := m.AnswerNow(query, nil, nil, nil); !ok {
		t.Fatal("the mirror read the question under routes its entries were not published under")
	}
}
