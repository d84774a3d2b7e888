//go:build !wasip1

package doh

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/engine/dnswire"
)

// miekgJSON is the JSON form as it was written from a message unpacked by
// miekg/dns, the reference the wire form's converter must match byte for
// byte; but for a type miekg/dns does not know, whose text it prints
// with a header of its own (CLASSn TYPEn) that the JSON form then showed
// as data: the data is RFC 3597's "\# n hex" alone now.
func miekgJSON(m *dns.Msg) jsonMessage {
	records := func(rrs []dns.RR, skipOPT bool) []jsonRecord {
		var out []jsonRecord
		for _, rr := range rrs {
			if _, ok := rr.(*dns.OPT); ok && skipOPT {
				continue
			}
			h := rr.Header()
			data := strings.TrimPrefix(rr.String(), h.String())
			if u, ok := rr.(*dns.RFC3597); ok {
				data = strings.TrimSuffix(`\# `+strconv.Itoa(len(u.Rdata)/2)+" "+u.Rdata, " ")
			}
			out = append(out, jsonRecord{Name: h.Name, Type: h.Rrtype, TTL: h.Ttl, Data: data})
		}
		return out
	}
	j := jsonMessage{
		Status: m.Rcode, TC: m.Truncated, RD: m.RecursionDesired, RA: m.RecursionAvailable,
		AD: m.AuthenticatedData, CD: m.CheckingDisabled,
		Question:   make([]jsonQuestion, 0, len(m.Question)),
		Answer:     records(m.Answer, false),
		Authority:  records(m.Ns, false),
		Additional: records(m.Extra, true),
	}
	for _, q := range m.Question {
		j.Question = append(j.Question, jsonQuestion{Name: q.Name, Type: q.Qtype})
	}
	for _, rr := range m.Extra {
		if opt, ok := rr.(*dns.OPT); ok {
			for _, o := range opt.Option {
				if ede, ok := o.(*dns.EDNS0_EDE); ok {
					s := "EDE " + strconv.Itoa(int(ede.InfoCode))
					if name, ok := dns.ExtendedErrorCodeToString[ede.InfoCode]; ok {
						s += " (" + name + ")"
					}
					if ede.ExtraText != "" {
						s += ": " + ede.ExtraText
					}
					j.Comment = s
				}
			}
		}
	}
	return j
}

var jsonRecordSamples = []string{
	`www.example.org. 300 IN A 192.0.2.1`,
	`www.example.org. 300 IN AAAA 2001:db8::1`,
	`www.example.org. 60 IN CNAME target.example.org.`,
	`example.org. 300 IN MX 10 mail.example.org.`,
	`example.org. 300 IN TXT "v=spf1 -all" "a \"quoted\" <b>&c \\ \009"`,
	`example.org. 300 IN SOA ns.example.org. host\.master.example.org. 1 7200 3600 1209600 300`,
	`example.org. 300 IN NS ns.example.org.`,
	`example.org. 300 IN CAA 0 issue "ca.example.net; account=<1>"`,
	`example.org. 300 IN DS 60485 5 1 2BB183AF5F22588179A53B0A98631FAD1A292118`,
	`example.org. 300 IN RRSIG A 13 2 300 20261231235959 20261201000000 12345 example.org. c2lnbmF0dXJl`,
	`example.org. 300 IN NSEC a.example.org. A NS SOA RRSIG NSEC`,
	`example.org. 300 IN HTTPS 1 . alpn="h2,h3" ipv4hint="192.0.2.1" ech="AEX+DQ=="`,
	`_sip._udp.example.org. 300 IN SRV 10 60 5060 sip.example.org.`,
	`a\.b\@c\000\255.example.org. 300 IN PTR x\ y.example.org.`,
	`example.org. 300 IN LOC 52 22 23.000 N 4 53 32.000 E -2.00m 0.00m 10000m 10m`,
	`example.org. 300 IN TYPE65280 \# 3 010203`,
}

// The JSON form written from the wire reply is the JSON form that was
// written from miekg/dns's reading of it, byte for byte: headers, every
// section, names with escapes, EDE comment, extended rcode.
func TestJSONFromWireAsFromMiekg(t *testing.T) {
	var rrs []dns.RR
	for _, s := range jsonRecordSamples {
		rr, err := dns.NewRR(s)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		rrs = append(rrs, rr)
	}
	r := rand.New(rand.NewPCG(8, 18))
	for i := 0; i < 300; i++ {
		m := new(dns.Msg)
		m.SetQuestion("www.example.org.", dns.TypeA)
		m.Id = uint16(r.Uint32())
		m.Response = true
		m.Rcode = r.IntN(6)
		m.Truncated, m.RecursionDesired, m.RecursionAvailable = r.IntN(2) == 0, r.IntN(2) == 0, r.IntN(2) == 0
		m.AuthenticatedData, m.CheckingDisabled, m.Authoritative = r.IntN(2) == 0, r.IntN(2) == 0, r.IntN(2) == 0
		pick := func() []dns.RR {
			var out []dns.RR
			for range r.IntN(4) {
				out = append(out, rrs[r.IntN(len(rrs))])
			}
			return out
		}
		m.Answer, m.Ns, m.Extra = pick(), pick(), pick()
		if r.IntN(2) == 0 {
			m.SetEdns0(1232, r.IntN(2) == 0)
			if r.IntN(3) == 0 {
				m.Rcode = dns.RcodeBadCookie
			}
			if r.IntN(2) == 0 {
				ede := &dns.EDNS0_EDE{InfoCode: uint16(r.IntN(32))}
				if r.IntN(2) == 0 {
					ede.ExtraText = "no servers <for> \"you\" \xff"
				}
				m.IsEdns0().Option = append(m.IsEdns0().Option, ede)
			}
		}
		m.Compress = r.IntN(2) == 0
		wire, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		ref := new(dns.Msg)
		if err := ref.Unpack(wire); err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(miekgJSON(ref))
		j, err := jsonFromWire(wire)
		if err != nil {
			t.Fatalf("%v: %v", ref, err)
		}
		got, _ := json.Marshal(j)
		if string(got) != string(want) {
			t.Fatalf("message %d:\n got %s\nwant %s", i, got, want)
		}
	}
}

// Record data that does not read as its type shows in the generic form;
// a message whose records do not read is an error.
func TestJSONFromWireMalformed(t *testing.T) {
	m := new(dns.Msg)
	m.SetQuestion("example.org.", dns.TypeA)
	m.Answer = []dns.RR{&dns.RFC3597{Hdr: dns.RR_Header{Name: "example.org.", Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 5}, Rdata: "c00002"}}
	wire := pack(t, m)
	j, err := jsonFromWire(wire)
	if err != nil || len(j.Answer) != 1 || j.Answer[0].Data != `\# 3 c00002` {
		t.Fatalf("%+v, %v", j, err)
	}
	for _, cut := range []int{5, 12, len(wire) - 1} {
		if _, err := jsonFromWire(wire[:cut]); err == nil {
			t.Errorf("cut at %d: no error", cut)
		}
	}
}

// The JSON request's query: the same message miekg/dns built from the
// same parameters (SetQuestion, ID 0, CD, EDNS, DO).
func TestJSONQueryAsMiekg(t *testing.T) {
	for _, raw := range []string{
		"name=example.org", "name=Example.ORG.&type=aaaa", "name=.&type=NS", "name=example.org&type=TYPE65280",
		"name=example.org&type=65&do=1", "name=example.org&cd=true", "name=a\\.b.example&type=txt&do=true&cd=1",
		"name=xn--bcher-kva.example&type=nsap-ptr",
		// Meta types read: the query made of them gets the wire verdict
		// (cmd/dohfwd TestOneQueryCheckEveryFrontEnd).
		"name=x&type=AXFR", "name=x&type=opt",
	} {
		v, _ := url.ParseQuery(raw)
		want, wantErr := miekgJSONQuery(v)
		got, qname, qtype, err := jsonQuery(v, []byte("pre"))
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("%s: err %v, want %v", raw, err, wantErr)
		}
		if err != nil {
			continue
		}
		w := pack(t, want)
		if string(got) != "pre"+string(w) || qname != want.Question[0].Name || qtype != want.Question[0].Qtype {
			t.Errorf("%s:\n got %x %q %d\nwant %x %q %d", raw, got[3:], qname, qtype, w, want.Question[0].Name, want.Question[0].Qtype)
		}
	}
	for _, raw := range []string{"", "name=a..b", "name=" + strings.Repeat("a.", 130), "name=x&type=NOPE", "name=x&type=0",
		"name=x&type=65536", "name=x&do=maybe", "name=x&cd=2", "name=x&type=Reserved"} {
		v, _ := url.ParseQuery(raw)
		_, wantErr := miekgJSONQuery(v)
		_, _, _, err := jsonQuery(v, nil)
		if err == nil || wantErr == nil || err.Error() != wantErr.Error() {
			t.Errorf("%s: err %v, want %v", raw, err, wantErr)
		}
	}
}

// checkQuery sorts queries as it did with miekg/dns: the same
// HTTP status, DNS error and question; the same problem text but for the
// parser's own words after "malformed/undecodable DNS message:".
func TestCheckQueryAsMiekg(t *testing.T) {
	base := func(edns bool) *dns.Msg {
		q := query(t, "www.example.org.", dns.TypeAAAA, 77)
		if edns {
			q.SetEdns0(1232, true)
		}
		return q
	}
	var cases [][]byte
	add := func(m *dns.Msg) { cases = append(cases, pack(t, m)) }
	add(base(false))
	add(base(true))
	for _, op := range []int{dns.OpcodeIQuery, dns.OpcodeStatus, 3, dns.OpcodeNotify, dns.OpcodeUpdate, 15} {
		m := base(true)
		m.Opcode = op
		add(m)
	}
	for _, qt := range []uint16{dns.TypeOPT, dns.TypeTSIG, dns.TypeTKEY, dns.TypeAXFR, dns.TypeIXFR, dns.TypeMAILA, dns.TypeMAILB, dns.TypeANY, 65280} {
		add(query(t, "example.org.", qt, 1))
	}
	noQ := base(false)
	noQ.Question = nil
	add(noQ)
	twoQ := base(false)
	twoQ.Question = append(twoQ.Question, twoQ.Question[0])
	add(twoQ)
	resp := base(false)
	resp.Response = true
	add(resp)
	withAnswer := base(true)
	rr, _ := dns.NewRR("example.org. 60 IN A 192.0.2.1")
	withAnswer.Answer = []dns.RR{rr}
	add(withAnswer)
	withNs := base(false)
	withNs.Ns = []dns.RR{rr}
	add(withNs)
	extraA := base(true)
	extraA.Extra = append([]dns.RR{rr}, extraA.Extra...)
	add(extraA)
	twoOPT := base(true)
	twoOPT.Extra = append(twoOPT.Extra, &dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT, Class: 512}})
	add(twoOPT)
	namedOPT := base(false)
	namedOPT.Extra = []dns.RR{&dns.OPT{Hdr: dns.RR_Header{Name: "example.", Rrtype: dns.TypeOPT, Class: 512}}}
	add(namedOPT)
	for _, v := range []uint8{1, 255} {
		m := base(true)
		m.IsEdns0().SetVersion(v)
		add(m)
	}
	badVersAXFR := query(t, "example.org.", dns.TypeAXFR, 1)
	badVersAXFR.SetEdns0(1232, false)
	badVersAXFR.IsEdns0().SetVersion(1)
	add(badVersAXFR)
	for _, ecs := range []dns.EDNS0_SUBNET{
		{Family: 1, SourceNetmask: 24, Address: []byte{192, 0, 2, 0}},
		{Family: 2, SourceNetmask: 56, Address: make([]byte, 16)},
		{Family: 0, SourceNetmask: 0, Address: []byte{0, 0, 0, 0}},
	} {
		m := base(true)
		ecs.Code = dns.EDNS0SUBNET
		m.IsEdns0().Option = append(m.IsEdns0().Option, &ecs)
		add(m)
	}
	// A client subnet option that does not read: family, netmask,
	// length (family, source, scope, address written by hand).
	for _, opt := range [][]byte{
		{0, 8, 0, 4, 0, 3, 0, 0}, {0, 8, 0, 4, 0, 1, 33, 0}, {0, 8, 0, 4, 0, 1, 0, 33}, {0, 8, 0, 4, 0, 2, 129, 0},
		{0, 8, 0, 4, 0, 0, 8, 0}, {0, 8, 0, 2, 0, 1}, {0, 8, 0, 9, 0, 1}, {0, 12, 0},
	} {
		w := pack(t, base(false))
		w[11] = 1
		w = append(w, 0, 0, 41, 4, 0xD0, 0, 0, 0, 0, byte(len(opt)>>8), byte(len(opt)))
		cases = append(cases, append(w, opt...))
	}
	// A few bytes past the last record are not read.
	cases = append(cases, append(pack(t, base(true)), 0, 0, 0))
	// The question name: compressed (pointing back into the header's
	// bytes), a pointer loop, a reserved label type, unusual bytes.
	cases = append(cases,
		[]byte{0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xC0, 0x0C, 0, 1, 0, 1},
		[]byte{0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0x40, 0, 0, 1, 0, 1},
		[]byte{0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 3, 'a', '.', 0xFF, 0, 0, 1, 0, 1},
		[]byte{0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 'a', 0xC0, 0x03, 0, 1, 0, 1},
		[]byte{0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 16, 0, 1},
	)
	for i, raw := range cases {
		q, rcode, status, problem := miekgCheckQuery(raw)
		want := queryCheck{status: status, rcode: rcode, problem: problem}
		if q != nil && len(q.Question) == 1 && status == statusOK {
			want.qname, want.qtype = q.Question[0].Name, q.Question[0].Qtype
		}
		got := checkQuery(raw)
		if status != statusOK {
			got.qname, got.qtype = "", 0 // begin does not keep them
		}
		for _, generic := range []string{"malformed DNS message: ", "undecodable DNS message: "} {
			if strings.HasPrefix(want.problem, generic) && strings.HasPrefix(got.problem, generic) &&
				!strings.Contains(want.problem, "12-byte") {
				want.problem, got.problem = generic, generic
			}
		}
		if got != want {
			t.Errorf("case %d %x:\n got %+v\nwant %+v", i, raw, got, want)
		}
	}
}

// A query cut short anywhere is never forwarded. (miekg/dns read one cut
// where a field or section starts as whole, with the rest zero: a
// question of type 0, say, went to the resolver.)
func TestCheckQueryRefusesCuts(t *testing.T) {
	q := query(t, "www.example.org.", dns.TypeAAAA, 77)
	q.SetEdns0(1232, true)
	full := pack(t, q)
	for n := 0; n < len(full); n++ {
		if c := checkQuery(full[:n]); c.status == statusOK && c.rcode < 0 {
			t.Errorf("cut at %d of %d: ready for the resolver", n, len(full))
		}
	}
	if c := checkQuery(full); c.status != statusOK || c.rcode >= 0 || c.qname != "www.example.org." || c.qtype != dns.TypeAAAA {
		t.Errorf("whole query: %+v", c)
	}
}

// miekgJSONQuery is how the query was built with miekg/dns, the
// reference for jsonQuery: the query a JSON request asks: RD set, ID 0, EDNS
// (DO when do is set), CD when cd is set.
func miekgJSONQuery(v url.Values) (*dns.Msg, error) {
	name := v.Get("name")
	if name == "" {
		return nil, errors.New("missing name parameter: want ?name=NAME&type=TYPE")
	}
	if err := miekgCheckName(name); err != nil {
		return nil, err
	}
	qtype, err := miekgParseType(v.Get("type"))
	if err != nil {
		return nil, err
	}
	do, err := parseFlag("do", v.Get("do"))
	if err != nil {
		return nil, err
	}
	cd, err := parseFlag("cd", v.Get("cd"))
	if err != nil {
		return nil, err
	}
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), qtype)
	q.Id = 0
	q.CheckingDisabled = cd
	q.SetEdns0(dns.DefaultMsgSize, do)
	return q, nil
}

// miekgCheckName accepts a domain name in presentation format, at most 253
// characters without the final dot.
func miekgCheckName(name string) error {
	n, ok := dns.IsDomainName(name)
	if len(strings.TrimSuffix(name, ".")) > 253 {
		return errors.New("bad name parameter " + strconv.Quote(name) + ": longer than 255 octets in wire form (253 characters)")
	}
	if !ok || n == 0 && name != "." {
		return errors.New("bad name parameter " + strconv.Quote(name) + ": not a domain name")
	}
	return nil
}

// miekgParseType reads a query type: a mnemonic ("AAAA", any case), a number
// ("28"), or RFC 3597 "TYPE28". "" is A.
func miekgParseType(s string) (uint16, error) {
	if s == "" {
		return dns.TypeA, nil
	}
	var t uint16
	if n, err := strconv.ParseUint(s, 10, 16); err == nil {
		t = uint16(n)
	} else if v, ok := dns.StringToType[strings.ToUpper(s)]; ok {
		t = v
	} else if u := strings.ToUpper(s); strings.HasPrefix(u, "TYPE") {
		if n, err := strconv.ParseUint(u[4:], 10, 16); err == nil {
			t = uint16(n)
		}
	}
	if t == 0 {
		return 0, errors.New("bad type parameter " + strconv.Quote(s) + ": want a type name (A, AAAA, ...), TYPEn or a number 1-65535")
	}
	return t, nil
}

// miekgCheckQuery is checkQuery as it was, on miekg/dns: the reference
// for checkQuery. It sorts a wire query into one of three cases:
//   - status != 200: not a query we can answer at all (the problem says
//     why); no DNS response.
//   - rcode ≥ 0: a query answered here with a DNS error (NOTIMP,
//     FORMERR, BADVERS); problem says why.
//   - otherwise q is ready for the resolver: QR clear, opcode QUERY, one
//     question.
func miekgCheckQuery(raw []byte) (q *dns.Msg, rcode, status int, problem string) {
	if len(raw) < headerSize {
		return nil, -1, statusBadRequest, "undecodable DNS message: shorter than the 12-byte header"
	}
	if raw[2]&flagQR != 0 {
		return nil, -1, statusBadRequest, "not a query: the message is a response (QR set)"
	}
	q = new(dns.Msg)
	err := q.Unpack(raw)
	if op := int(raw[2]>>3) & 0xF; op != dns.OpcodeQuery {
		// The header says what it is; answer it even if the rest is odd.
		return q, dns.RcodeNotImplemented, statusOK,
			"opcode " + opcodeName(op) + " is not implemented"
	}
	if qd := int(raw[4])<<8 | int(raw[5]); qd != 1 {
		return nil, -1, statusBadRequest, "want exactly one question, QDCOUNT is " + strconv.Itoa(qd)
	}
	if err != nil {
		if len(q.Question) == 1 {
			// Header and question read: the rest is malformed.
			return q, dns.RcodeFormatError, statusOK,
				"malformed DNS message: " + err.Error()
		}
		return nil, -1, statusBadRequest, "undecodable DNS message: " + err.Error()
	}
	if len(q.Question) != 1 {
		return nil, -1, statusBadRequest, "undecodable DNS message: the question is missing"
	}
	if rcode, why := miekgQueryProblem(q); rcode != dns.RcodeSuccess {
		return q, rcode, statusOK, why
	}
	return q, -1, statusOK, ""
}

// miekgQueryProblem checks a parsed query with one question for what a DNS
// server would refuse to read: records in the answer or authority section,
// more than one OPT or an OPT misplaced, a meta type as the question, an
// EDNS version above 0.
func miekgQueryProblem(q *dns.Msg) (rcode int, why string) {
	if len(q.Answer) != 0 || len(q.Ns) != 0 {
		return dns.RcodeFormatError, "malformed query: records in the answer or authority section"
	}
	opts := 0
	for _, rr := range q.Extra {
		if rr.Header().Rrtype == dns.TypeOPT {
			opts++
			if rr.Header().Name != "." {
				return dns.RcodeFormatError, "malformed query: OPT record with a name other than the root"
			}
		}
	}
	if opts > 1 {
		return dns.RcodeFormatError, "malformed query: more than one OPT record"
	}
	switch q.Question[0].Qtype {
	case dns.TypeOPT, dns.TypeTSIG, dns.TypeTKEY:
		return dns.RcodeFormatError, "malformed query: " + dns.TypeToString[q.Question[0].Qtype] + " as the question type"
	case dns.TypeAXFR, dns.TypeIXFR, dns.TypeMAILA, dns.TypeMAILB:
		return dns.RcodeNotImplemented, "question type " + dns.TypeToString[q.Question[0].Qtype] + " is not implemented"
	}
	if o := q.IsEdns0(); o != nil && o.Version() != 0 {
		return dns.RcodeBadVers, "EDNS version " + strconv.Itoa(int(o.Version())) + " is not supported"
	}
	return dns.RcodeSuccess, ""
}

// FuzzJSONFromWire: any reply converts without a panic; one that
// miekg/dns reads, holding only types dnswire writes as miekg/dns does
// (or neither knows), gives the JSON miekg/dns's reading gave, but for
// record data miekg/dns read with fields missing (it stops at the data's
// end), which shows here in the generic form, and empty record data (an
// update's), which shows as "" here, as zero fields there.
func FuzzJSONFromWire(f *testing.F) {
	m := new(dns.Msg)
	m.SetQuestion("www.example.org.", dns.TypeA)
	for _, s := range jsonRecordSamples {
		rr, _ := dns.NewRR(s)
		m.Answer = append(m.Answer, rr)
	}
	m.SetEdns0(1232, true)
	m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_EDE{InfoCode: 22, ExtraText: "x"})
	m.Compress = true
	seed, _ := m.Pack()
	f.Add(seed)
	f.Fuzz(func(t *testing.T, wire []byte) {
		j, err := jsonFromWire(wire)
		ref := new(dns.Msg)
		if ref.Unpack(wire) != nil || err != nil {
			return
		}
		want := miekgJSON(ref)
		rrs := append(append([]dns.RR(nil), ref.Answer...), ref.Ns...)
		for _, rr := range ref.Extra {
			if _, ok := rr.(*dns.OPT); !ok {
				rrs = append(rrs, rr)
			}
		}
		i := 0
		for _, pair := range [][2][]jsonRecord{{j.Answer, want.Answer}, {j.Authority, want.Authority}, {j.Additional, want.Additional}} {
			if len(pair[0]) != len(pair[1]) {
				t.Fatalf("%x: sections differ: %+v, %+v", wire, j, want)
			}
			for k := range pair[0] {
				_, generic := rrs[i].(*dns.RFC3597)
				if !generic && (!knownForm(rrs[i].Header().Rrtype) || strings.HasPrefix(pair[0][k].Data, `\# `) || pair[0][k].Data == "") {
					pair[1][k].Data = pair[0][k].Data
				}
				i++
			}
		}
		got, _ := json.Marshal(j)
		wantJSON, _ := json.Marshal(want)
		if string(got) != string(wantJSON) {
			t.Fatalf("%x:\n got %s\nwant %s", wire, got, wantJSON)
		}
	})
}

// knownForm reports whether dnswire writes rrtype's data field by field
// (as miekg/dns does), not in the generic form.
func knownForm(rrtype uint16) bool {
	out, err := dnswire.AppendRdataText(nil, make([]byte, 4), rrtype, 0, 4)
	return err != nil || string(out) != `\# 4 00000000`
}

// opcodeName is an opcode's mnemonic, or its number when it has none.
func opcodeName(op int) string {
	switch op {
	case dnswire.OpcodeQuery, dnswire.OpcodeIQuery, dnswire.OpcodeStatus, dnswire.OpcodeNotify, dnswire.OpcodeUpdate:
		return dnswire.OpcodeString(op)
	}
	return strconv.Itoa(op)
}
