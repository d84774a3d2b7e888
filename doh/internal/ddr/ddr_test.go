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
// answer asks tab about name and qtype with a query packed by miekg/dns
// (edns: with an OPT record, DO set) and reads the reply with miekg/dns;
// nil when the table does not answer.
func answer(t *testing.T, tab *Table, name string, qtype uint16, edns bool) *dns.Msg {
	t.Helper()
	q := new(dns.Msg)
	q.SetQuestion(name, qtype)
	q.Id, q.CheckingDisabled = 4321, true
	if edns {
		q.SetEdns0(1232, true)
	}
	raw, err := q.Pack()
	if err != nil {
		t.Fatal(err)
	}
	wire, ok := tab.AppendAnswer([]byte("prefix"), raw)
	if string(wire[:6]) != "prefix" {
		t.Fatalf("dst overwritten: %q", wire)
	}
	if !ok {
		if len(wire) != 6 {
			t.Errorf("%s: not answered but %d bytes appended", name, len(wire)-6)
		}
		return nil
	}
	m := new(dns.Msg)
	if err := m.Unpack(wire[6:]); err != nil {
		t.Fatalf("%s: reply does not unpack: %v", name, err)
	}
	if m.Id != q.Id || !m.Response || !m.RecursionDesired || !m.CheckingDisabled || !m.RecursionAvailable ||
		len(m.Question) != 1 || m.Question[0] != q.Question[0] {
		t.Errorf("%s: reply header or question %v", name, m)
	}
	if o := m.IsEdns0(); (o != nil) != edns || edns && (!o.Do() || o.UDPSize() != dns.DefaultMsgSize) {
		t.Errorf("%s: OPT %v, query had one: %v", name, o, edns)
	}
	return m
}

// RFC 9462 section 4 and RFC 9461: DoH is alpn=h2 with dohpath, DoT is
// alpn=dot; the port is the listener's; the hints and the name's A and
// AAAA records carry the configured addresses. Read back from the wire.
func TestDesignationRecordsOnTheWire(t *testing.T) {
	for _, edns := range []bool{false, true} {
		m := answer(t, NewTable(example), Name, dns.TypeSVCB, edns)
		if m == nil || m.Rcode != dns.RcodeSuccess || !m.Authoritative || len(m.Answer) != 2 {
			t.Fatalf("reply %v", m)
		}
		want := []map[string]string{
			{"alpn": "h2", "port": "8443", "ipv4hint": "192.0.2.53", "ipv6hint": "2001:db8::53", "dohpath": "/dns-query{?dns}"},
			{"alpn": "dot", "port": "853", "ipv4hint": "192.0.2.53", "ipv6hint": "2001:db8::53"},
		}
		for i, rr := range m.Answer {
			s := rr.(*dns.SVCB)
			if s.Hdr.Name != Name || s.Hdr.Ttl != TTL || s.Target != "dns.example.net." || s.Priority != uint16(i+1) {
				t.Errorf("record %d: %v", i, s)
			}
			if got := params(t, rr); !reflect.DeepEqual(got, want[i]) {
				t.Errorf("record %d params %v, want %v", i, got, want[i])
			}
		}
		extra := m.Extra[:len(m.Extra)-map[bool]int{false: 0, true: 1}[edns]]
		if len(extra) != 2 || extra[0].(*dns.A).A.String() != "192.0.2.53" || extra[1].(*dns.AAAA).AAAA.String() != "2001:db8::53" ||
			extra[0].Header().Name != "dns.example.net." {
			t.Errorf("additional %v", m.Extra)
		}
	}
}

// A DoH listener that also serves HTTP/3 on its port lists h3 after h2
// (RFC 9461 section 3.1).
func TestDesignationHTTP3(t *testing.T) {
	d := Designation{Names: []string{"dns.example.net"}, Endpoints: []Endpoint{{Protocol: DoH, Port: 443, Path: "/dns-query", HTTP3: true}}}
	m := answer(t, NewTable(d), Name, dns.TypeSVCB, false)
	if m == nil || len(m.Answer) != 1 {
		t.Fatalf("reply %v", m)
	}
	if p := params(t, m.Answer[0]); p["alpn"] != "h2,h3" || p["dohpath"] != "/dns-query{?dns}" {
		t.Errorf("params %v, want alpn h2,h3 and the dohpath", p)
	}
}

// Several names and addresses of each family: every name gets a record
// per endpoint, the hints list every address, the name in lower case.
func TestDesignationSeveralNamesAndAddresses(t *testing.T) {
	d := Designation{
		Names:     []string{"A.example", "b.example."},
		Addresses: []netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("::ffff:192.0.2.2"), netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2")},
		Endpoints: []Endpoint{{Protocol: DoT, Port: 853}},
	}
	m := answer(t, NewTable(d), Name, dns.TypeSVCB, false)
	if m == nil || len(m.Answer) != 2 || len(m.Extra) != 8 {
		t.Fatalf("reply %v", m)
	}
	for i, target := range []string{"a.example.", "b.example."} {
		s := m.Answer[i].(*dns.SVCB)
		p := params(t, s)
		if s.Target != target || s.Priority != uint16(i+1) || p["ipv4hint"] != "192.0.2.1,192.0.2.2" || p["ipv6hint"] != "2001:db8::1,2001:db8::2" || p["alpn"] != "dot" {
			t.Errorf("record %d: %v", i, s)
		}
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
		{"RESOLVER.ARPA.", dns.TypeSVCB, dns.RcodeSuccess, 0},
		{"other.resolver.arpa.", dns.TypeSVCB, dns.RcodeNameError, 0},
		{"a.b._dns.resolver.arpa.", dns.TypeSVCB, dns.RcodeNameError, 0},
		{"example.net.", dns.TypeSVCB, -1, 0},
		{"arpa.", dns.TypeNS, -1, 0},
		{"xresolver.arpa.", dns.TypeNS, -1, 0},
		{"resolver.arpa.example.", dns.TypeNS, -1, 0},
		{".", dns.TypeNS, -1, 0},
	} {
		m := answer(t, tab, tc.name, tc.qtype, false)
		switch {
		case tc.rcode < 0 && m != nil:
			t.Errorf("%s %s answered locally", tc.name, dns.TypeToString[tc.qtype])
		case tc.rcode >= 0 && (m == nil || m.Rcode != tc.rcode || len(m.Answer) != tc.n || !m.Authoritative):
			t.Errorf("%s %s: %v", tc.name, dns.TypeToString[tc.qtype], m)
		}
	}
	var none *Table // no designation yet: NODATA, not the upstream's
	if m := answer(t, none, Name, dns.TypeSVCB, true); m == nil || m.Rcode != dns.RcodeSuccess || len(m.Answer) != 0 {
		t.Errorf("without a designation: %v", m)
	}
	// What does not read as one question is not answered here.
	for _, raw := range [][]byte{nil, {0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 4, '_', 'd'}} {
		if out, ok := tab.AppendAnswer(nil, raw); ok || len(out) != 0 {
			t.Errorf("%x answered: %x", raw, out)
		}
	}
}

// countingNext answers every query REFUSED, counting them.
type countingNext struct{ wire int }

func (c *countingNext) Resolve(_ context.Context, query, dst []byte) engine.Response {
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
		resp := r.Resolve(t.Context(), raw, nil)
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

func (c *fastNext) ResolveMiss(context.Context, *engine.Miss, []byte) engine.Response {
	panic("fastNext never misses")
}

func (c *fastNext) AnswerNow(_, dst []byte, _ *engine.Trace, _ *engine.Miss) (engine.Response, bool) {
	c.immediate++
	return engine.Response{Wire: append(dst, 0, 0), Result: engine.ResultLocal, CacheHit: true}, true
}

// The immediate path (cache hits answered on the connection's goroutine)
// passes every name outside resolver.arpa through and answers no name
// inside it at once: those take Resolve's way, then the table's.
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
		_, ok := r.AnswerNow(raw, nil, nil, nil)
		if ok != c.want || (next.immediate > before) != c.want {
			t.Errorf("%s: answered at once %v (next asked %v), want %v", c.name, ok, next.immediate > before, c.want)
		}
	}
	// A next without the immediate path: nothing is answered at once.
	plain := Wrap(new(countingNext))
	q := new(dns.Msg)
	q.SetQuestion("www.example.net.", dns.TypeA)
	raw, _ := q.Pack()
	if _, ok := plain.AnswerNow(raw, nil, nil, nil); ok {
		t.Error("answered at once without a next that can")
	}
}
