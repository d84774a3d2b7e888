package engine

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestEntryForRoom: every size gets an empty msg with room for it, inside
// the entry's allocation up to the largest tier and beyond it on its own.
func TestEntryForRoom(t *testing.T) {
	for n := 0; n <= 1500; n++ {
		en := entryFor(n)
		if len(en.msg) != 0 || cap(en.msg) < n {
			t.Fatalf("entryFor(%d): len %d cap %d", n, len(en.msg), cap(en.msg))
		}
		if n > 456 && cap(en.msg) != n {
			t.Fatalf("entryFor(%d): cap %d, want a buffer of its own of %d", n, cap(en.msg), n)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = entryFor(100) }); n != 1 {
		t.Fatalf("entryFor(100): %v allocations, want 1", n)
	}
}

// TestEntryReplyFactsAsWalk: the rcode and TTL respond takes from an
// entry's kept facts are what walking the client's reply gives, for
// positive and negative answers, clamped, aged, stale, with and without
// the client's OPT and padding.
func TestEntryReplyFactsAsWalk(t *testing.T) {
	soa := "example.test. %d IN SOA ns.example.test. host.example.test. 1 2 3 4 %d"
	cases := []struct {
		name          string
		rcode         int
		answer, ns    []string
		extra         []string
		upstreamEDNS0 bool
	}{
		{"positive", dns.RcodeSuccess, []string{"a.example.test. 30 IN A 192.0.2.1", "a.example.test. 10 IN A 192.0.2.2"}, nil, nil, true},
		{"positive, authority lower", dns.RcodeSuccess, []string{"a.example.test. 3000 IN A 192.0.2.1"}, []string{"example.test. 5 IN NS ns.example.test."}, []string{"ns.example.test. 1 IN A 192.0.2.53"}, false},
		{"positive, huge TTL", dns.RcodeSuccess, []string{"a.example.test. 4000000000 IN A 192.0.2.1"}, nil, nil, true},
		{"NODATA", dns.RcodeSuccess, nil, []string{fmt.Sprintf(soa, 900, 300)}, nil, true},
		{"NXDOMAIN, SOA TTL lower", dns.RcodeNameError, nil, []string{fmt.Sprintf(soa, 60, 300)}, nil, false},
		{"NXDOMAIN, two SOAs", dns.RcodeNameError, nil, []string{fmt.Sprintf(soa, 700, 20), fmt.Sprintf(soa, 5, 5)}, nil, true},
		{"NXDOMAIN without SOA", dns.RcodeNameError, nil, nil, nil, true},
		{"NODATA without SOA", dns.RcodeSuccess, nil, []string{"example.test. 300 IN NS ns.example.test."}, nil, true},
	}
	confs := []CacheConfig{{}, {MinTTL: 20 * time.Second, MaxTTL: time.Hour, NegativeMaxTTL: 50 * time.Second}}
	stored := time.Unix(1_000_000, 0)
	for _, tc := range cases {
		m := new(dns.Msg)
		m.SetQuestion("a.example.test.", dns.TypeA)
		m.Response, m.Rcode = true, tc.rcode
		for _, group := range []struct {
			to *[]dns.RR
			ss []string
		}{{&m.Answer, tc.answer}, {&m.Ns, tc.ns}, {&m.Extra, tc.extra}} {
			for _, s := range group.ss {
				rr, err := dns.NewRR(s)
				if err != nil {
					t.Fatal(err)
				}
				*group.to = append(*group.to, rr)
			}
		}
		if tc.upstreamEDNS0 {
			m.SetEdns0(1232, false)
		}
		m.Compress = true
		wire, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		result := ResultAnswer
		if tc.rcode == dns.RcodeNameError {
			result = ResultNXDomain
		}
		for _, conf := range confs {
			w, ok := walkReply(wire, nil)
			if !ok {
				t.Fatal("walk")
			}
			en := entryFor(len(wire))
			en.msg = append(en.msg, wire...)
			w, _ = walkReply(en.msg, nil) // offsets into the entry's copy
			en = makeEntry(en, &w, result, &conf, stored)
			for _, q := range []*dns.Msg{
				new(dns.Msg).SetQuestion("A.example.test.", dns.TypeA),
				new(dns.Msg).SetQuestion("a.example.test.", dns.TypeA).SetEdns0(4096, true),
				paddedQuery(t),
			} {
				raw, err := q.Pack()
				if err != nil {
					t.Fatal(err)
				}
				cq, ok := parseQuery(raw)
				if !ok {
					t.Fatal("parse")
				}
				for _, at := range []struct {
					now      time.Time
					staleTTL int64
				}{
					{stored, -1}, {stored.Add(1500 * time.Millisecond), -1}, {stored.Add(40 * time.Second), -1},
					{stored.Add(2 * time.Hour), -1}, {stored.Add(-time.Second), -1}, {stored.Add(time.Hour), 30},
				} {
					reply := en.write(nil, cq, cq.qname, at.now, at.staleTTL)
					rw, ok := walkReply(reply, nil)
					if !ok {
						t.Fatalf("%s: the reply does not walk", tc.name)
					}
					wantTTL, wantCacheable := answerTTL(rw.facts)
					rcode, ttl, cacheable, ok := en.replyFacts(at.now, at.staleTTL)
					if !ok || rcode != rw.rcode || ttl != wantTTL || cacheable != wantCacheable {
						t.Errorf("%s, conf %+v, at %v stale %d: facts %d %d %v %v, walk %d %d %v",
							tc.name, conf, at.now.Sub(stored), at.staleTTL, rcode, ttl, cacheable, ok, rw.rcode, wantTTL, wantCacheable)
					}
				}
			}
		}
	}
	if _, _, _, ok := new(entry).replyFacts(stored, -1); ok {
		t.Error("an entry makeEntry did not make claims facts")
	}
}

func paddedQuery(t *testing.T) *dns.Msg {
	t.Helper()
	q := new(dns.Msg).SetQuestion("a.example.test.", dns.TypeA).SetEdns0(1232, false)
	opt := q.IsEdns0()
	opt.Option = append(opt.Option, &dns.EDNS0_PADDING{Padding: make([]byte, 8)})
	return q
}

// TestCopiedEntryIsEqual: copied, the copy a flight's followers get of
// a leader's entry held in its buffers, has every field of the entry
// (a field added to entry and not to copied fails here) and shares no
// bytes the buffers' next user writes.
func TestCopiedEntryIsEqual(t *testing.T) {
	en := &entry{result: ResultNXDomain, staleOnly: true, optClass: 4096,
		msg: []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, optData: []byte{0, 15, 0, 2, 0, 3},
		stored: time.Unix(1_000_000, 0), ttl: time.Minute, scope: "test",
		minPositive: 1, soaTTL: 2, soaMinimum: 3, hasSOA: true, hasFacts: true}
	en.ttlSpace[0], en.ttlSpace[1] = 6, 8
	en.ttls = en.ttlSpace[:2]
	en.asks.Store(3)
	en.prefetched.Store(true)
	en.reads.Store(2)
	en.publishedIn.Store(4)
	v := reflect.ValueOf(en).Elem()
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Fatalf("the test entry's %s is zero: set it, so copied is checked for it", v.Type().Field(i).Name)
		}
	}
	c := en.copied()
	if !reflect.DeepEqual(c, en) {
		t.Fatalf("copied:\n%+v\nwant\n%+v", c, en)
	}
	en.msg[0], en.ttls[0] = 99, 99
	if c.msg[0] != 1 || c.ttls[0] != 6 {
		t.Fatal("the copy shares the original's msg or TTL offsets")
	}
}
