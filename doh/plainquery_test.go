package doh

import (
	"net"
	"testing"

	"github.com/miekg/dns"
)

// An ordinary query is read from its bytes; anything unusual is left to
// checkQuery, which knows every error answer.
func TestPlainQueryReadsOrdinaryQueriesOnly(t *testing.T) {
	pack := func(edit func(*dns.Msg)) []byte {
		q := new(dns.Msg)
		q.SetQuestion("Www.Example-1.org.", dns.TypeAAAA)
		edit(q)
		b, err := q.Pack()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	edns := func(q *dns.Msg) { q.SetEdns0(1232, true) }
	cases := []struct {
		name  string
		raw   []byte
		plain bool
	}{
		{"no EDNS", pack(func(*dns.Msg) {}), true},
		{"EDNS with DO", pack(edns), true},
		{"padded", pack(func(q *dns.Msg) {
			edns(q)
			q.IsEdns0().Option = append(q.IsEdns0().Option, &dns.EDNS0_PADDING{Padding: make([]byte, 40)})
		}), true},
		{"root", func() []byte { q := new(dns.Msg); q.SetQuestion(".", dns.TypeNS); b, _ := q.Pack(); return b }(), true},
		{"ECS", pack(func(q *dns.Msg) {
			edns(q)
			q.IsEdns0().Option = append(q.IsEdns0().Option, &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: 24, Address: net.IPv4(192, 0, 2, 0)})
		}), false},
		{"EDNS version 1", pack(func(q *dns.Msg) { edns(q); q.IsEdns0().SetVersion(1) }), false},
		{"AXFR", pack(func(q *dns.Msg) { q.Question[0].Qtype = dns.TypeAXFR }), false},
		{"escaped label", pack(func(q *dns.Msg) { q.Question[0].Name = "a\\.b.example." }), false},
		{"response", pack(func(q *dns.Msg) { q.Response = true }), false},
		{"NOTIFY", pack(func(q *dns.Msg) { q.Opcode = dns.OpcodeNotify }), false},
		{"trailing byte", append(pack(func(*dns.Msg) {}), 0), false},
	}
	for _, c := range cases {
		name, qtype, ok := plainQuery(c.raw)
		if ok != c.plain {
			t.Errorf("%s: plain = %v, want %v", c.name, ok, c.plain)
			continue
		}
		if !ok {
			continue
		}
		if chk := checkQuery(c.raw); chk.status != 200 || chk.rcode >= 0 || chk.qname != name || chk.qtype != qtype {
			t.Errorf("%s: plainQuery %q/%d, checkQuery %+v", c.name, name, qtype, chk)
		}
	}
}

// plainQuery is plainQueryType with the name (plainName), as the tests
// compare both with checkQuery's reading.
func plainQuery(raw []byte) (name string, qtype uint16, ok bool) {
	if qtype, ok = plainQueryType(raw); !ok {
		return "", 0, false
	}
	return plainName(raw), qtype, true
}
