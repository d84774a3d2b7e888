package dnswire_test

import (
	"bytes"
	"net/netip"
	"strconv"
	"testing"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/engine/dnswire"
)

// miekg/dns is the reference the codec is checked against.

var names = []string{
	".", "a.", "example.com.", "WWW.Example.COM.", `a\.b.example.`, `a\032b.`, `a\\b.`, `x\"y.`, `q\'r.`,
	`s\@t.`, `u\;v.`, `\(p\).`, `\000\255.`, "under_score.", "a-b.c-d.",
	"abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabc.",  // 63
	"abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcd.", // 64: too long
	"..", ".a.", "a..b.", "a", "a.b", `a\.`, `a\\.`, `a\`, "",
}

func TestPackNameAsMiekg(t *testing.T) {
	for _, s := range names {
		buf := make([]byte, 512)
		end, werr := dns.PackDomainName(s, buf, 0, nil, false)
		got, err := dnswire.PackName(nil, s)
		if (err == nil) != (werr == nil) && s != "" {
			t.Errorf("PackName(%q): err %v, miekg %v", s, err, werr)
			continue
		}
		if err == nil && !bytes.Equal(got, buf[:end]) {
			t.Errorf("PackName(%q) = %x, miekg %x", s, got, buf[:end])
		}
	}
}

func TestUnpackNameAsMiekg(t *testing.T) {
	for _, s := range names {
		buf := make([]byte, 512)
		end, err := dns.PackDomainName(s, buf, 0, nil, false)
		if err != nil || s == "" {
			continue
		}
		want, wantOff, _ := dns.UnpackDomainName(buf[:end], 0)
		got, off, err := dnswire.UnpackName(buf[:end], 0)
		if err != nil || got != want || off != wantOff {
			t.Errorf("UnpackName(%q) = %q, %d, %v; miekg %q, %d", s, got, off, err, want, wantOff)
		}
		if got := dnswire.NameText(buf[:end]); got != want {
			t.Errorf("NameText(%q) = %q, miekg %q", s, got, want)
		}
	}
}

func TestNamePredicatesAsMiekg(t *testing.T) {
	for _, s := range append(names, "a.b.c", `a\.b`, `a\\.b`, "localhost") {
		if got, want := dnswire.IsFqdn(s), dns.IsFqdn(s); got != want {
			t.Errorf("IsFqdn(%q) = %v, miekg %v", s, got, want)
		}
		if got, want := dnswire.Fqdn(s), dns.Fqdn(s); got != want {
			t.Errorf("Fqdn(%q) = %q, miekg %q", s, got, want)
		}
		if s != "" {
			if got, want := dnswire.CountLabel(s), dns.CountLabel(s); got != want {
				t.Errorf("CountLabel(%q) = %d, miekg %d", s, got, want)
			}
		}
		gl, gok := dnswire.IsDomainName(s)
		wl, wok := dns.IsDomainName(s)
		if gok != wok || gok && gl != wl {
			t.Errorf("IsDomainName(%q) = %d, %v; miekg %d, %v", s, gl, gok, wl, wok)
		}
	}
}

func TestReverseAddrAsMiekg(t *testing.T) {
	for _, a := range []string{"127.0.0.1", "192.0.2.10", "::1", "2001:db8::1", "::ffff:10.0.0.1"} {
		want, _ := dns.ReverseAddr(a)
		if got := dnswire.ReverseAddr(netip.MustParseAddr(a)); got != want {
			t.Errorf("ReverseAddr(%s) = %q, miekg %q", a, got, want)
		}
	}
}

func TestEqualNames(t *testing.T) {
	a, _ := dnswire.PackName(nil, "WwW.Example.")
	b, _ := dnswire.PackName(nil, "www.example.")
	c, _ := dnswire.PackName(nil, "www.exampld.")
	if !dnswire.EqualNames(a, b) || dnswire.EqualNames(a, c) {
		t.Fatal("EqualNames ignores case and only case")
	}
}

// compressedReply is a reply miekg/dns packs with compression, with names
// in RDATA of every kind AppendRRExpanded expands.
func compressedReply(t *testing.T) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion("www.example.com.", dns.TypeA)
	m.Response, m.Compress = true, true
	for _, s := range []string{
		"www.example.com. 300 IN CNAME web.example.com.",
		"web.example.com. 60 IN A 192.0.2.1",
		"example.com. 60 IN MX 10 mail.example.com.",
		"_s._tcp.example.com. 60 IN SRV 1 2 53 ns.example.com.",
		"example.com. 60 IN TXT \"hello\" \"world\"",
	} {
		rr, err := dns.NewRR(s)
		if err != nil {
			t.Fatal(err)
		}
		m.Answer = append(m.Answer, rr)
	}
	soa, _ := dns.NewRR("example.com. 900 IN SOA ns.example.com. host.example.com. 1 2 3 4 5")
	ns, _ := dns.NewRR("example.com. 900 IN NS ns.example.com.")
	glue, _ := dns.NewRR("ns.example.com. 900 IN A 192.0.2.53")
	m.Ns = append(m.Ns, soa, ns)
	m.Extra = append(m.Extra, glue)
	m.SetEdns0(1232, true)
	return m
}

func TestParserReadsWhatMiekgPacks(t *testing.T) {
	m := compressedReply(t)
	wire, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	p, ok := dnswire.NewParser(wire)
	if !ok {
		t.Fatal("no header")
	}
	if h := p.Header(); h.ID != m.Id || !h.Has(dnswire.FlagQR) || h.Counts != [4]uint16{1, 5, 2, 2} {
		t.Fatalf("header %+v", h)
	}
	q, ok := p.Question()
	if !ok || q.Type != dns.TypeA || q.Class != dns.ClassINET {
		t.Fatalf("question %+v %v", q, ok)
	}
	if name, _ := dnswire.QuestionName(wire, q); dnswire.NameText(name) != "www.example.com." {
		t.Fatalf("question name %q", dnswire.NameText(name))
	}
	want := append(append(append([]dns.RR{}, m.Answer...), m.Ns...), m.Extra...)
	var sections []dnswire.Section
	i := 0
	for {
		rr, ok := p.Next()
		if !ok {
			break
		}
		h := want[i].Header()
		if rr.Type != h.Rrtype || rr.Class != h.Class || rr.TTL != h.Ttl {
			t.Errorf("record %d: %+v, want %v", i, rr, want[i])
		}
		sections = append(sections, rr.Section)
		if rr.Type != dns.TypeOPT {
			// Expanded, the record stands alone: miekg/dns reads it back.
			alone, err := dnswire.AppendRRExpanded(nil, wire, rr)
			if err != nil {
				t.Fatalf("record %d: %v", i, err)
			}
			got, _, err := dns.UnpackRR(alone, 0)
			if err != nil || got.String() != want[i].String() {
				t.Errorf("record %d expanded: %v (%v), want %v", i, got, err, want[i])
			}
		}
		i++
	}
	if p.Err() != nil || i != len(want) {
		t.Fatalf("read %d records of %d: %v", i, len(want), p.Err())
	}
	if sections[4] != dnswire.SectionAnswer || sections[5] != dnswire.SectionAuthority || sections[8] != dnswire.SectionAdditional {
		t.Fatalf("sections %v", sections)
	}
	opt, ok := dnswire.FindOPT(wire)
	if !ok {
		t.Fatal("no OPT found")
	}
	if o := dnswire.ReadOPT(wire, opt); o.UDPSize != 1232 || !o.DO() {
		t.Fatalf("OPT %+v", o)
	}
}

func TestParserStopsAtCutMessages(t *testing.T) {
	wire, _ := compressedReply(t).Pack()
	for n := 0; n < len(wire); n++ {
		p, ok := dnswire.NewParser(wire[:n])
		if !ok {
			continue
		}
		for {
			if _, ok := p.Next(); !ok {
				break
			}
		}
		if p.Err() == nil {
			t.Fatalf("cut at %d of %d: no error", n, len(wire))
		}
	}
}

func TestBuilderWritesWhatMiekgReads(t *testing.T) {
	qname, _ := dnswire.PackName(nil, "Host.Example.")
	target, _ := dnswire.PackName(nil, "target.example.")
	b := dnswire.NewBuilder([]byte("prefix"), dnswire.Header{ID: 0x1234,
		Flags: dnswire.Flags(dnswire.OpcodeQuery, dnswire.RcodeServerFailure, dnswire.FlagQR|dnswire.FlagRD|dnswire.FlagRA|dnswire.FlagCD)})
	b.Question(qname, dns.TypeA, dns.ClassINET)
	b.NameRR(dnswire.SectionAnswer, qname, dns.TypeCNAME, dns.ClassINET, 60, target)
	b.RR(dnswire.SectionAnswer, target, dns.TypeA, dns.ClassINET, 30, []byte{192, 0, 2, 1})
	b.OPT(4096, dnswire.EDNSFlagDO, dnswire.AppendEDE(nil, dnswire.ExtendedErrorCodeNoReachableAuthority, "no servers"))
	out, err := b.Finish()
	if err != nil || string(out[:6]) != "prefix" {
		t.Fatal(err, out)
	}
	m := new(dns.Msg)
	if err := m.Unpack(out[6:]); err != nil {
		t.Fatal(err)
	}
	if m.Id != 0x1234 || !m.Response || !m.RecursionDesired || !m.RecursionAvailable || !m.CheckingDisabled ||
		m.Rcode != dns.RcodeServerFailure || len(m.Question) != 1 || m.Question[0].Name != "Host.Example." {
		t.Fatalf("header or question: %v", m)
	}
	if len(m.Answer) != 2 || m.Answer[0].String() != "Host.Example.\t60\tIN\tCNAME\ttarget.example." ||
		m.Answer[1].String() != "target.example.\t30\tIN\tA\t192.0.2.1" {
		t.Fatalf("answer: %v", m.Answer)
	}
	o := m.IsEdns0()
	if o == nil || o.UDPSize() != 4096 || !o.Do() || len(o.Option) != 1 {
		t.Fatalf("OPT: %v", o)
	}
	if ede, ok := o.Option[0].(*dns.EDNS0_EDE); !ok || ede.InfoCode != 22 || ede.ExtraText != "no servers" {
		t.Fatalf("EDE: %v", o.Option[0])
	}
	if owner := out[6+12+len(qname)+4:]; owner[0] != 0xC0 || owner[1] != 12 {
		t.Fatalf("owner not a pointer to the question: %x", owner[:2])
	}
}

func TestCopyRRRecompresses(t *testing.T) {
	m := compressedReply(t)
	wire, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	p, _ := dnswire.NewParser(wire)
	q, _ := p.Question()
	qname, _ := dnswire.QuestionName(wire, q)
	b := dnswire.NewBuilder(nil, p.Header())
	b.Question(qname, q.Type, q.Class)
	for {
		rr, ok := p.Next()
		if !ok {
			break
		}
		if err := b.CopyRR(rr.Section, wire, rr); err != nil {
			t.Fatal(err)
		}
	}
	out, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	got := new(dns.Msg)
	if err := got.Unpack(out); err != nil {
		t.Fatal(err)
	}
	if got.String() != m.String() {
		t.Fatalf("copied:\n%v\nwant:\n%v", got, m)
	}
	// miekg/dns also compresses the SRV target, which RFC 3597 §4 does not
	// allow: a few bytes apart at most.
	if len(out) > len(wire)+8 {
		t.Fatalf("copy is %d bytes, miekg/dns packs %d", len(out), len(wire))
	}
}

func TestAppendPlainNameText(t *testing.T) {
	for _, s := range names {
		wire, err := dnswire.PackName(nil, s)
		if err != nil {
			continue
		}
		text := dnswire.NameText(wire)
		got, plain := dnswire.AppendPlainNameText(nil, wire)
		if plain != !bytes.ContainsRune([]byte(text), '\\') || plain && string(got) != text {
			t.Errorf("AppendPlainNameText(%q) = %q, %v; text %q", s, got, plain, text)
		}
	}
}

// A message with many names is built in bounded time and reads back.
func TestBuilderManyNames(t *testing.T) {
	b := dnswire.NewBuilder(nil, dnswire.Header{})
	q, _ := dnswire.PackName(nil, "q.example.")
	b.Question(q, dns.TypeA, dns.ClassINET)
	for i := range 3000 {
		name, _ := dnswire.PackName(nil, "n"+strconv.Itoa(i)+".sub"+strconv.Itoa(i%7)+".example.")
		b.NameRR(dnswire.SectionAnswer, name, dns.TypeCNAME, dns.ClassINET, 1, q)
	}
	out, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	m := new(dns.Msg)
	if err := m.Unpack(out); err != nil || len(m.Answer) != 3000 || m.Answer[2999].Header().Name != "n2999.sub3.example." {
		t.Fatalf("%v, %d answers", err, len(m.Answer))
	}
}
