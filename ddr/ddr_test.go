package ddr

import (
	"context"
	"net/netip"
	"reflect"
	"testing"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/enginetest"
)

// params reads an SVCB record's parameters as key=value text.
func params(t *testing.T, rr dns.RR) map[string]string {
	t.Helper()
	s, ok := rr.(*dns.SVCB)
	if !ok {
		t.Fatalf("%v is not SVCB", rr)
	}
	out := map[string]string{}
	for _, kv := range s.Value {
		out[kv.Key().String()] = kv.String()
	}
	return out
}

var example = Designation{
	Names:     []string{"dns.example.net"},
	Addresses: []netip.Addr{netip.MustParseAddr("192.0.2.53"), netip.MustParseAddr("2001:db8::53")},
	Endpoints: []Endpoint{{Protocol: DoH, Port: 8443, Path: "/dns-query"}, {Protocol: DoT, Port: 853}},
}

// RFC 9462 section 4 and RFC 9461: DoH is alpn=h2 with dohpath, DoT is
// alpn=dot; the port is the listener's; the hints and the name's A and
// AAAA records carry the configured addresses. Read back from the wire.
func TestDesignationRecordsOnTheWire(t *testing.T) {
	q := new(dns.Msg)
	q.SetQuestion(Name, dns.TypeSVCB)
	reply := NewTable(example).Answer(q)
	wire, err := reply.Pack()
	if err != nil {
		t.Fatal(err)
	}
	m := new(dns.Msg)
	if err := m.Unpack(wire); err != nil {
		t.Fatal(err)
	}
	if m.Rcode != dns.RcodeSuccess || !m.Authoritative || len(m.Answer) != 2 {
		t.Fatalf("reply %v", m)
	}
	want := []map[string]string{
		{"alpn": "h2", "port": "8443", "ipv4hint": "192.0.2.53", "ipv6hint": "2001:db8::53", "dohpath": "/dns-query{?dns}"},
		{"alpn": "dot", "port": "853", "ipv4hint": "192.0.2.53", "ipv6hint": "2001:db8::53"},
	}
	for i, rr := range m.Answer {
		s := rr.(*dns.SVCB)
		if s.Hdr.Name != Name || s.Target != "dns.example.net." || s.Priority != uint16(i+1) {
			t.Errorf("record %d: %v", i, s)
		}
		if got := params(t, rr); !reflect.DeepEqual(got, want[i]) {
			t.Errorf("record %d params %v, want %v", i, got, want[i])
		}
	}
	if len(m.Extra) != 2 || m.Extra[0].(*dns.A).A.String() != "192.0.2.53" || m.Extra[1].(*dns.AAAA).AAAA.String() != "2001:db8::53" {
		t.Errorf("additional %v", m.Extra)
	}
}

// RFC 9462 section 6.4: names under resolver.arpa are answered here and
// never forwarded; other names are not this package's.
func TestResolverArpaIsAnsweredLocally(t *testing.T) {
	tab := NewTable(example)
	for _, tc := range []struct {
		name  string
		qtype uint16
		rcode int // -1: not answered here
		n     int
	}{
		{"_DNS.Resolver.Arpa.", dns.TypeSVCB, dns.RcodeSuccess, 2},
		{Name, dns.TypeA, dns.RcodeSuccess, 0},
		{"resolver.arpa.", dns.TypeSOA, dns.RcodeSuccess, 0},
		{"other.resolver.arpa.", dns.TypeSVCB, dns.RcodeNameError, 0},
		{"example.net.", dns.TypeSVCB, -1, 0},
		{"arpa.", dns.TypeNS, -1, 0},
	} {
		q := new(dns.Msg)
		q.SetQuestion(tc.name, tc.qtype)
		m := tab.Answer(q)
		switch {
		case tc.rcode < 0 && m != nil:
			t.Errorf("%s %s answered locally", tc.name, dns.TypeToString[tc.qtype])
		case tc.rcode >= 0 && (m == nil || m.Rcode != tc.rcode || len(m.Answer) != tc.n):
			t.Errorf("%s %s: %v", tc.name, dns.TypeToString[tc.qtype], m)
		}
	}
	var none *Table // no designation yet: NODATA, not the upstream's
	q := new(dns.Msg)
	q.SetQuestion(Name, dns.TypeSVCB)
	if m := none.Answer(q); m == nil || m.Rcode != dns.RcodeSuccess || len(m.Answer) != 0 {
		t.Errorf("without a designation: %v", m)
	}
}

// countingNext answers every query REFUSED, counting them.
type countingNext struct{ wire int }

func (c *countingNext) ResolveWire(_ context.Context, query, dst []byte) engine.Response {
	c.wire++
	q := new(dns.Msg)
	if err := q.Unpack(query); err != nil {
		return engine.Response{Wire: dst, Rcode: -1}
	}
	out, _ := new(dns.Msg).SetRcode(q, dns.RcodeRefused).Pack()
	return engine.Response{Wire: append(dst, out...), Rcode: dns.RcodeRefused}
}

func TestResolverForwardsTheRest(t *testing.T) {
	next := new(countingNext)
	r := Wrap(next)
	r.Designate(example)
	q := new(dns.Msg)
	q.SetQuestion(Name, dns.TypeSVCB)
	if resp := enginetest.Resolve(r, t.Context(), q); len(resp.Msg.Answer) != 2 || resp.Result != engine.ResultLocal || next.wire != 0 {
		t.Fatalf("DDR: %v (next asked %d)", resp.Msg, next.wire)
	}
	q.SetQuestion("www.example.net.", dns.TypeA)
	if resp := enginetest.Resolve(r, t.Context(), q); resp.Msg.Rcode != dns.RcodeRefused || next.wire != 1 {
		t.Fatalf("other: %v", resp.Msg)
	}
}

// The DoH wire path reaches the engine as bytes for every name outside
// resolver.arpa; names inside it are answered from the table.
func TestResolverWirePathAnswersZoneFromTable(t *testing.T) {
	next := new(countingNext)
	r := Wrap(next)
	r.Designate(example)
	for _, c := range []struct {
		name   string
		inZone bool
	}{
		{Name, true},
		{"_DNS.Resolver.ARPA.", true},
		{"resolver.arpa.", true},
		{"www.example.net.", false},
		{"arpa.", false},
		{"resolver.arpa.example.", false},
		{".", false},
	} {
		q := new(dns.Msg)
		q.SetQuestion(c.name, dns.TypeSVCB)
		raw, err := q.Pack()
		if err != nil {
			t.Fatal(err)
		}
		before := next.wire
		resp := r.ResolveWire(t.Context(), raw, nil)
		forwarded := next.wire > before
		if forwarded == c.inZone {
			t.Errorf("%s: forwarded as bytes = %v, want %v", c.name, forwarded, !c.inZone)
		}
		if c.inZone && (len(resp.Wire) < 12 || resp.Result != engine.ResultLocal) {
			t.Errorf("%s: wire answer %x (%v), want the table's", c.name, resp.Wire, resp.Result)
		}
	}
	if !inZone([]byte{0, 1, 2}) {
		t.Error("a query cut short must be unpacked")
	}
}

// fastNext is a countingNext that answers everything at once.
type fastNext struct {
	countingNext
	immediate int
}

func (c *fastNext) ResolveWireImmediate(_, dst []byte, _ *engine.Trace) (engine.Response, bool) {
	c.immediate++
	return engine.Response{Wire: append(dst, 0, 0), Result: engine.ResultLocal, CacheHit: true}, true
}

// The immediate path (cache hits answered on the connection's goroutine)
// passes every name outside resolver.arpa through and answers no name
// inside it at once: those take ResolveWire's way, then the table's.
func TestResolverImmediatePassesThroughOutsideZone(t *testing.T) {
	next := new(fastNext)
	r := Wrap(next)
	r.Designate(example)
	for _, c := range []struct {
		name string
		want bool
	}{
		{Name, false},
		{"resolver.arpa.", false},
		{"www.example.net.", true},
	} {
		q := new(dns.Msg)
		q.SetQuestion(c.name, dns.TypeA)
		raw, err := q.Pack()
		if err != nil {
			t.Fatal(err)
		}
		before := next.immediate
		_, ok := r.ResolveWireImmediate(raw, nil, nil)
		if ok != c.want || (next.immediate > before) != c.want {
			t.Errorf("%s: answered at once %v (next asked %v), want %v", c.name, ok, next.immediate > before, c.want)
		}
	}
	// A next without the immediate path: nothing is answered at once.
	plain := Wrap(new(countingNext))
	q := new(dns.Msg)
	q.SetQuestion("www.example.net.", dns.TypeA)
	raw, _ := q.Pack()
	if _, ok := plain.ResolveWireImmediate(raw, nil, nil); ok {
		t.Error("answered at once without a next that can")
	}
}
