package engine_test

import (
	"context"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
	"github.com/miekg/dns"
)

// The wire path (wire.go): upstream replies are matched, walked, stored
// and written to the client as bytes. These tests send real replies over
// loopback and read what a client gets.

// packed is an upstream action that sends m packed as given (compressed
// when m.Compress), optionally changed after packing by edit.
func packed(m *dns.Msg, edit func([]byte) []byte) upstreamtest.Action {
	b, err := m.Pack()
	if err != nil {
		panic(err)
	}
	if edit != nil {
		b = edit(b)
	}
	return upstreamtest.Action{Replies: []upstreamtest.Reply{{Raw: b}}}
}

// rrs parses zone-file records.
func rrs(t *testing.T, ss ...string) []dns.RR {
	t.Helper()
	var out []dns.RR
	for _, s := range ss {
		rr, err := dns.NewRR(s)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rr)
	}
	return out
}

// wireEngine is an engine over real sockets with the cache on, and a
// function asking it one query as bytes and unpacking the client's reply.
func wireEngine(t *testing.T, h upstreamtest.Handler) (*engine.Engine, *upstreamtest.Server, func(q *dns.Msg) (engine.Response, *dns.Msg)) {
	t.Helper()
	up := upstreamtest.Start(t, h)
	e, err := engine.New(engine.Config{
		TransactionTimeout: 500 * time.Millisecond,
		Cache:              engine.CacheConfig{MaxEntries: 100},
		Scopes:             []engine.ScopeConfig{{Name: "main", DefaultRoute: true, Servers: []string{up.String()}}},
	}, engine.Options{Network: engine.NativeNetwork{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	ask := func(q *dns.Msg) (engine.Response, *dns.Msg) {
		t.Helper()
		raw, err := q.Pack()
		if err != nil {
			t.Fatal(err)
		}
		r := e.ResolveWire(context.Background(), raw, nil)
		m := new(dns.Msg)
		if err := m.Unpack(r.Wire); err != nil {
			t.Fatalf("the client's reply does not unpack: %v", err)
		}
		if m.Id != q.Id {
			t.Errorf("reply ID %d, want the client's %d", m.Id, q.Id)
		}
		return r, m
	}
	return e, up, ask
}

func recordsText(rs []dns.RR) string {
	var b strings.Builder
	for _, r := range rs {
		c := dns.Copy(r)
		c.Header().Ttl = 0
		b.WriteString(c.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// A compressed reply (a CNAME chain, NS and glue pointing back at earlier
// names) reaches the client record for record, first from upstream and
// then from the cache.
func TestWireCompressionPointers(t *testing.T) {
	answer := []string{"www.example.test. 300 IN CNAME web.example.test.", "web.example.test. 300 IN A 192.0.2.1"}
	ns := []string{"example.test. 300 IN NS ns1.example.test.", "example.test. 300 IN NS ns2.example.test."}
	glue := []string{"ns1.example.test. 300 IN A 192.0.2.53", "ns2.example.test. 300 IN A 192.0.2.54"}
	_, up, ask := wireEngine(t, func(q upstreamtest.Query) upstreamtest.Action {
		m := upstreamtest.ReplyTo(q.Msg, dns.RcodeSuccess, answer...)
		m.Ns = rrs(t, ns...)
		m.Extra = append(rrs(t, glue...), m.Extra...)
		m.Compress = true
		return packed(m, nil)
	})
	sent := &dns.Msg{Answer: rrs(t, answer...), Ns: rrs(t, ns...), Extra: rrs(t, glue...)}
	for i, wantHit := range []bool{false, true} {
		q := newQuery("www.example.test.", dns.TypeA)
		q.Id = uint16(1000 + i)
		r, m := ask(q)
		if r.Result != map[bool]engine.Result{false: engine.ResultAnswer, true: engine.ResultLocal}[wantHit] || r.CacheHit != wantHit {
			t.Fatalf("ask %d: result %v hit %v", i, r.Result, r.CacheHit)
		}
		for _, sec := range [][2][]dns.RR{{m.Answer, sent.Answer}, {m.Ns, sent.Ns}} {
			if got, want := recordsText(sec[0]), recordsText(sec[1]); got != want {
				t.Errorf("ask %d: records\n%s want\n%s", i, got, want)
			}
		}
		if got, want := recordsText(m.Extra), recordsText(sent.Extra[:2]); got != want {
			t.Errorf("ask %d: additional\n%s want\n%s (and no OPT: the client sent none)", i, got, want)
		}
	}
	if n := len(up.Queries()); n != 1 {
		t.Errorf("upstream asked %d times, want 1 (then the cache)", n)
	}
}

// The upstream's OPT is rewritten for the client: EDE kept, per-hop
// options (cookie, padding) dropped, the client's DO; a client without
// OPT gets none (RFC 6891). An OPT in the middle of the additional
// section, before records that point at earlier names, is handled too.
func TestWireOPTAndEDE(t *testing.T) {
	for _, optFirst := range []bool{false, true} {
		_, _, ask := wireEngine(t, func(q upstreamtest.Query) upstreamtest.Action {
			m := upstreamtest.ReplyTo(q.Msg, dns.RcodeSuccess, "@ 300 IN A 192.0.2.1")
			m.Ns = rrs(t, "example.test. 300 IN NS ns1.example.test.")
			glue := rrs(t, "ns1.example.test. 300 IN A 192.0.2.53", "ns1.example.test. 300 IN AAAA 2001:db8::53")
			opt := &dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT}}
			opt.SetUDPSize(1232)
			opt.Option = []dns.EDNS0{
				&dns.EDNS0_EDE{InfoCode: dns.ExtendedErrorCodeStaleAnswer, ExtraText: "stale"},
				&dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0102030405060708"},
				&dns.EDNS0_PADDING{Padding: make([]byte, 8)},
			}
			if optFirst {
				m.Extra = append([]dns.RR{opt}, glue...)
			} else {
				m.Extra = append(glue, opt)
			}
			m.Compress = true
			return packed(m, nil)
		})
		for i, do := range []bool{true, false} {
			q := newQuery("www.example.test.", dns.TypeA)
			q.SetEdns0(4096, do)
			r, m := ask(q)
			if r.Result != engine.ResultAnswer && r.Result != engine.ResultLocal {
				t.Fatalf("optFirst=%v ask %d: %v", optFirst, i, r.Result)
			}
			o := m.IsEdns0()
			if o == nil {
				t.Fatalf("optFirst=%v: no OPT for a client that sent one", optFirst)
			}
			if o.Do() != do {
				t.Errorf("optFirst=%v: DO %v, want the client's %v", optFirst, o.Do(), do)
			}
			if len(o.Option) != 1 || o.Option[0].Option() != dns.EDNS0EDE || o.Option[0].(*dns.EDNS0_EDE).ExtraText != "stale" {
				t.Errorf("optFirst=%v: options %v, want the EDE alone", optFirst, o.Option)
			}
			if got := recordsText(m.Extra[:len(m.Extra)-1]); got != recordsText(rrs(t, "ns1.example.test. 300 IN A 192.0.2.53", "ns1.example.test. 300 IN AAAA 2001:db8::53")) {
				t.Errorf("optFirst=%v: glue\n%s", optFirst, got)
			}
		}
		_, m := ask(newQuery("www.example.test.", dns.TypeA))
		if m.IsEdns0() != nil {
			t.Errorf("optFirst=%v: OPT sent to a client that sent none", optFirst)
		}
	}
}

// cutLast removes the last byte of a packed message: its final record is
// truncated.
func cutLast(b []byte) []byte { return b[:len(b)-1] }

// A reply whose final record is cut: with TC over UDP it is a truncated
// reply (the TCP retry answers); without TC it is garbage, ignored and
// counted, and the good reply that follows is used.
func TestWireTruncatedFinalRecord(t *testing.T) {
	t.Run("TC", func(t *testing.T) {
		_, up, ask := wireEngine(t, func(q upstreamtest.Query) upstreamtest.Action {
			m := upstreamtest.ReplyTo(q.Msg, dns.RcodeSuccess, "@ 300 IN A 192.0.2.1", "@ 300 IN A 192.0.2.2")
			if q.Transport == "udp" {
				m.Truncated = true
				return packed(m, cutLast)
			}
			return packed(m, nil)
		})
		r, m := ask(newQuery("www.example.test.", dns.TypeA))
		if r.Result != engine.ResultAnswer || len(m.Answer) != 2 || m.Truncated || r.Attempts != 2 {
			t.Fatalf("result %v, %d answers, TC %v, %d attempts; want the TCP retry's whole answer",
				r.Result, len(m.Answer), m.Truncated, r.Attempts)
		}
		if qs := up.Queries(); len(qs) != 2 || qs[1].Transport != "tcp" {
			t.Fatalf("upstream queries %d, want UDP then TCP", len(qs))
		}
	})
	t.Run("no TC", func(t *testing.T) {
		e, _, ask := wireEngine(t, func(q upstreamtest.Query) upstreamtest.Action {
			m := upstreamtest.ReplyTo(q.Msg, dns.RcodeSuccess, "@ 300 IN A 192.0.2.1", "@ 300 IN A 192.0.2.2")
			cut := packed(m, cutLast)
			good := packed(m, nil)
			good.Replies[0].Delay = 20 * time.Millisecond
			return upstreamtest.Action{Replies: append(cut.Replies, good.Replies...)}
		})
		r, m := ask(newQuery("www.example.test.", dns.TypeA))
		if r.Result != engine.ResultAnswer || len(m.Answer) != 2 || r.Attempts != 1 {
			t.Fatalf("result %v, %d answers, %d attempts; want the whole reply that followed", r.Result, len(m.Answer), r.Attempts)
		}
		if n := e.Counters().MismatchedReplies; n != 1 {
			t.Errorf("mismatched_replies %d, want 1 (the cut reply)", n)
		}
	})
}

// A TTL of 0: the client gets the answer with max-age 0, and it is not
// cached (the next question asks upstream again).
func TestWireTTLZero(t *testing.T) {
	_, up, ask := wireEngine(t, upstreamtest.Answer("@ 0 IN A 192.0.2.1"))
	for range 2 {
		r, m := ask(newQuery("zero.example.test.", dns.TypeA))
		if r.Result != engine.ResultAnswer || r.CacheHit || len(m.Answer) != 1 || m.Answer[0].Header().Ttl != 0 {
			t.Fatalf("result %v hit %v answer %v", r.Result, r.CacheHit, m.Answer)
		}
		if r.TTL != 0 || !r.Cacheable {
			t.Errorf("TTL %d cacheable %v, want 0 true (Cache-Control: max-age=0)", r.TTL, r.Cacheable)
		}
	}
	if n := len(up.Queries()); n != 2 {
		t.Errorf("upstream asked %d times, want 2: TTL 0 is not cached", n)
	}
}

// 0x20: a client's mixed-case name is matched against an upstream that
// answers in another case, and every client gets its own case back,
// from upstream and from the cache.
func TestWireMixedCase(t *testing.T) {
	_, up, ask := wireEngine(t, func(q upstreamtest.Query) upstreamtest.Action {
		m := upstreamtest.ReplyTo(q.Msg, dns.RcodeSuccess, "www.example.test. 300 IN A 192.0.2.1")
		m.Question[0].Name = strings.ToLower(m.Question[0].Name)
		return packed(m, nil)
	})
	for _, name := range []string{"WwW.ExAmPlE.TeSt.", "wWw.eXaMpLe.tEsT."} {
		r, m := ask(newQuery(name, dns.TypeA))
		if r.Result != engine.ResultAnswer && r.Result != engine.ResultLocal {
			t.Fatalf("%s: %v", name, r.Result)
		}
		if m.Question[0].Name != name {
			t.Errorf("question %q, want the client's %q", m.Question[0].Name, name)
		}
		if len(m.Answer) != 1 {
			t.Errorf("%s: %d answers", name, len(m.Answer))
		}
	}
	if n := len(up.Queries()); n != 1 {
		t.Errorf("upstream asked %d times, want 1: case does not split the cache", n)
	}
}

// A padded query gets a reply padded to a multiple of 468 bytes, from
// upstream and from the cache; an unpadded one is not padded.
func TestWirePadding(t *testing.T) {
	_, _, ask := wireEngine(t, upstreamtest.Answer("@ 300 IN A 192.0.2.1"))
	for i := range 3 {
		q := newQuery("pad.example.test.", dns.TypeA)
		q.SetEdns0(1232, false)
		padded := i < 2
		if padded {
			o := q.IsEdns0()
			o.Option = append(o.Option, &dns.EDNS0_PADDING{Padding: make([]byte, 50)})
		}
		r, m := ask(q)
		if padded != (len(r.Wire)%engine.PaddingBlock == 0) {
			t.Errorf("ask %d: padded query %v, reply %d bytes", i, padded, len(r.Wire))
		}
		if len(m.Answer) != 1 {
			t.Errorf("ask %d: %d answers", i, len(m.Answer))
		}
	}
}

// The TTL of an answer (one rule: the cache, Cache-Control and search
// CNAMEs). RFC 2308 decides negative answers by the SOA in the authority
// section; for positive answers the authority section bounds the TTL too,
// since a cache keeps and serves those records; additional records and
// OPT do not.
func TestAnswerTTLRule(t *testing.T) {
	soa := "example.test. 900 IN SOA ns.example.test. host.example.test. 1 2 3 4 300"
	cases := []struct {
		name      string
		rcode     int
		answer    []string
		ns        []string
		extra     []string
		ttl       uint32
		cacheable bool
	}{
		{"positive: smallest answer TTL", dns.RcodeSuccess, []string{"a.example.test. 30 IN A 192.0.2.1", "a.example.test. 10 IN A 192.0.2.2"}, nil, nil, 10, true},
		{"positive: authority bounds it", dns.RcodeSuccess, []string{"a.example.test. 30 IN A 192.0.2.1"}, []string{"example.test. 5 IN NS ns.example.test."}, nil, 5, true},
		{"positive: additional does not", dns.RcodeSuccess, []string{"a.example.test. 30 IN A 192.0.2.1"}, nil, []string{"ns.example.test. 2 IN A 192.0.2.53"}, 30, true},
		{"positive: TTL 0", dns.RcodeSuccess, []string{"a.example.test. 0 IN A 192.0.2.1"}, nil, nil, 0, true},
		{"NODATA: SOA minimum", dns.RcodeSuccess, nil, []string{soa}, nil, 300, true},
		{"NXDOMAIN: SOA minimum", dns.RcodeNameError, nil, []string{soa}, nil, 300, true},
		{"NXDOMAIN: SOA TTL below minimum", dns.RcodeNameError, nil, []string{"example.test. 60 IN SOA ns.example.test. host.example.test. 1 2 3 4 300"}, nil, 60, true},
		{"NXDOMAIN without SOA", dns.RcodeNameError, nil, nil, nil, 0, false},
		{"NODATA without SOA", dns.RcodeSuccess, nil, []string{"example.test. 300 IN NS ns.example.test."}, nil, 0, false},
		{"SERVFAIL", dns.RcodeServerFailure, []string{"a.example.test. 30 IN A 192.0.2.1"}, nil, nil, 0, false},
	}
	for _, tc := range cases {
		m := new(dns.Msg)
		m.SetQuestion("a.example.test.", dns.TypeA)
		m.Response, m.Rcode = true, tc.rcode
		m.Answer, m.Ns, m.Extra = rrs(t, tc.answer...), rrs(t, tc.ns...), rrs(t, tc.extra...)
		m.SetEdns0(1232, false)
		m.Compress = true
		wire, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		ttl, ok := engine.WireTTL(wire)
		if ttl != tc.ttl || ok != tc.cacheable {
			t.Errorf("%s: WireTTL %d %v, want %d %v", tc.name, ttl, ok, tc.ttl, tc.cacheable)
		}
	}
}

// The client's Cache-Control TTL comes from the same rule, from upstream
// and from the cache.
func TestWireCacheControlTTL(t *testing.T) {
	_, _, ask := wireEngine(t, func(q upstreamtest.Query) upstreamtest.Action {
		m := upstreamtest.ReplyTo(q.Msg, dns.RcodeSuccess, "@ 30 IN A 192.0.2.1")
		m.Ns = rrs(t, "example.test. 3 IN NS ns.example.test.")
		return packed(m, nil)
	})
	r, _ := ask(newQuery("age.example.test.", dns.TypeA))
	if r.TTL != 3 {
		t.Fatalf("TTL %d, want 3 (the NS in authority)", r.TTL)
	}
	r, m := ask(newQuery("age.example.test.", dns.TypeA))
	if !r.CacheHit || binary.BigEndian.Uint16(r.Wire) != m.Id || r.TTL > 3 || !r.Cacheable {
		t.Fatalf("second ask: hit %v TTL %d cacheable %v", r.CacheHit, r.TTL, r.Cacheable)
	}
}

// A query whose question name is compressed, here pointing forward into
// an additional record (miekg/dns reads it, so some client may send it),
// is read from a copy with its names written out, and answered with the
// name in full.
func TestWireCompressedQuestionName(t *testing.T) {
	e, _, _ := wireEngine(t, func(q upstreamtest.Query) upstreamtest.Action {
		return packed(upstreamtest.ReplyTo(q.Msg, dns.RcodeSuccess, "@ 300 IN A 192.0.2.1"), nil)
	})
	name := []byte{3, 'w', 'w', 'w', 7, 'e', 'x', 'a', 'm', 'p', 'l', 'e', 0}
	query := []byte{0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 1}
	query = append(query, 0xC0, 12+2+4) // the question: a pointer past it
	query = append(query, 0, 1, 0, 1)   // A IN
	query = append(query, name...)      // the additional record's owner
	query = append(query, 0, 16, 0, 1, 0, 0, 0, 0, 0, 2, 1, 'x')
	if err := new(dns.Msg).Unpack(query); err != nil {
		t.Fatalf("the test query does not unpack: %v", err)
	}
	r := e.ResolveWire(context.Background(), query, nil)
	m := new(dns.Msg)
	if err := m.Unpack(r.Wire); err != nil {
		t.Fatalf("reply %x: %v", r.Wire, err)
	}
	if r.Result != engine.ResultAnswer || m.Id != 0x1234 || m.Question[0].Name != "www.example." || len(m.Answer) != 1 {
		t.Fatalf("%v: %v", r.Result, m)
	}
}
