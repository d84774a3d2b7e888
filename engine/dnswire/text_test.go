package dnswire

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// textSamples are records in presentation format, one or more per type
// with a form, with the escapes each field can need.
var textSamples = []string{
	`a.example. 300 IN A 192.0.2.1`,
	`a.example. 300 IN AAAA 2001:db8::1`,
	`a.example. 300 IN AAAA ::ffff:192.0.2.1`,
	`a.example. 300 IN AAAA ::102:304`,
	`a.example. 300 IN NS ns1.example.`,
	`a.example. 300 IN CNAME b\.c\@d\032e\\f\"g\(h\)\;i.example.`,
	`a.example. 300 IN CNAME \000\255\127\031~.example.`,
	`a.example. 300 IN DNAME .`,
	`a.example. 300 IN PTR host.example.`,
	`a.example. 300 IN MB mb.example.`,
	`a.example. 300 IN MD md.example.`,
	`a.example. 300 IN MF mf.example.`,
	`a.example. 300 IN MG mg.example.`,
	`a.example. 300 IN MR mr.example.`,
	`a.example. 300 IN NSAP-PTR nsap.example.`,
	`a.example. 300 IN MINFO r.example. e.example.`,
	`a.example. 300 IN RP mbox.example. txt.example.`,
	`a.example. 300 IN TALINK p.example. n.example.`,
	`a.example. 300 IN MX 10 mail.example.`,
	`a.example. 300 IN AFSDB 1 afs.example.`,
	`a.example. 300 IN RT 2 rt.example.`,
	`a.example. 300 IN KX 3 kx.example.`,
	`a.example. 300 IN LP 4 lp.example.`,
	`a.example. 300 IN PX 5 a.example. b.example.`,
	`a.example. 300 IN SOA ns.example. host\.master.example. 2026120101 7200 3600 1209600 4294967295`,
	`a.example. 300 IN TXT "hello world" "quote\"back\\slash" "\000\255tab\009" ""`,
	`a.example. 300 IN TXT "v=spf1 -all"`,
	`a.example. 300 IN SPF "v=spf1 include:x.example -all"`,
	`a.example. 300 IN AVC "app-name:WebEx"`,
	`a.example. 300 IN NINFO "ninfo"`,
	`a.example. 300 IN RESINFO "qnamemin" "exterr=15-17"`,
	`a.example. 300 IN HINFO "INTEL-386" "Unix \"x\""`,
	`a.example. 300 IN ISDN "150862028003217" "004"`,
	`a.example. 300 IN UINFO "info"`,
	`a.example. 300 IN X25 311061700956`,
	`a.example. 300 IN GPOS -32.6882 116.8652 10.0`,
	`a.example. 300 IN SRV 10 60 5060 sip.example.`,
	`a.example. 300 IN NAPTR 100 50 "s" "SIP+D2U" "!^.*$!sip:info@example.com!" _sip._udp.example.`,
	`a.example. 300 IN NAPTR 100 50 "a\"b" "" "\\d" .`,
	`a.example. 300 IN CAA 0 issue "letsencrypt.org"`,
	`a.example. 300 IN CAA 128 iodef "mailto:a\"b@example.com"`,
	`a.example. 300 IN CAA 0 issue "a\\065b\\.c\\\\d\\"`,
	`a.example. 300 IN URI 10 1 "https://example.com/a b"`,
	`a.example. 300 IN DS 60485 5 1 2BB183AF5F22588179A53B0A98631FAD1A292118`,
	`a.example. 300 IN CDS 60485 5 2 2bb183af5f22588179a53b0a98631fad1a292118aabbccdd00112233aabbccdd`,
	`a.example. 300 IN DLV 60485 5 1 2BB183AF5F22588179A53B0A98631FAD1A292118`,
	`a.example. 300 IN TA 60485 5 1 2BB183AF5F22588179A53B0A98631FAD1A292118`,
	`a.example. 300 IN SSHFP 4 2 123456789ABCDEF67890123456789ABCDEF67890123456789ABCDEF123456789`,
	`a.example. 300 IN DNSKEY 257 3 13 mdsswUyr3DPW132mOi8V9xESWE8jTo0dxCjjnopKl+GqJxpVXckHAeF+KkxLbxILfDLUT0rAK9iUzy1L53eKGQ==`,
	`a.example. 300 IN CDNSKEY 256 3 8 AwEAAa==`,
	`a.example. 300 IN KEY 256 3 8 AwEAAa==`,
	`a.example. 300 IN RKEY 0 3 5 AwEAAc==`,
	`a.example. 300 IN RRSIG A 13 2 300 20261231235959 20261201000000 12345 example. c2lnbmF0dXJlIGJ5dGVz`,
	`a.example. 300 IN RRSIG TYPE65280 8 3 86400 19700101000000 21060207062815 1 . AAAA`,
	`a.example. 300 IN NSEC b.example. A NS SOA MX TXT AAAA RRSIG NSEC DNSKEY CAA TYPE1234 TYPE65534`,
	`a.example. 300 IN NSEC b.example.`,
	`a.example. 300 IN NXT b.example. A MX`,
	`a.example. 300 IN SIG SOA 8 1 0 20261231235959 20261201000000 1 example. AAAA`,
	`a.example. 300 IN NSEC3 1 1 12 AABBCCDD 2T7B4G4VSA5SMI47K61MV5BV1A22BOJR A RRSIG`,
	`a.example. 300 IN NSEC3 1 0 0 - 2T7B4G4VSA5SMI47K61MV5BV1A22BOJR`,
	`a.example. 300 IN NSEC3PARAM 1 0 10 AABB`,
	`a.example. 300 IN NSEC3PARAM 1 0 0 -`,
	`a.example. 300 IN CSYNC 66 3 A NS AAAA`,
	`a.example. 300 IN TLSA 3 1 1 8D02536C887482BC34FF54E41D2BA659BF85B341A0A20AFADB5813DCFBCF286D`,
	`a.example. 300 IN SMIMEA 3 1 1 8D02536C887482BC34FF54E41D2BA659BF85B341A0A20AFADB5813DCFBCF286D`,
	`a.example. 300 IN ZONEMD 2018031500 1 1 FEBE3D4CE2EC2FFA4BA99D46CD69D6D29711E55217057BEE7EB1A7B641A47BA7FED2DD5B97AE499FAFA4F22C6BD647DE`,
	`a.example. 300 IN DHCID AAIBY2/AuCccgoJbsaxcQc9TUapptP69lOjxfNuVAA2kjEA=`,
	`a.example. 300 IN OPENPGPKEY mQINBFit2jsBEADrbl5vjVxYeAE0g0IDYCBpHirv1Sjlqxx5gjtPhb2YhvyDMXjq`,
	`a.example. 300 IN EID 12 89 AB`,
	`a.example. 300 IN NIMLOC 32 10 01`,
	`a.example. 300 IN UID 42`,
	`a.example. 300 IN GID 4294967295`,
	`a.example. 300 IN L32 10 10.1.2.0`,
	`a.example. 300 IN L64 10 2001:0DB8:1140:1000`,
	`a.example. 300 IN NID 10 0014:4fff:ff20:ee64`,
	`a.example. 300 IN EUI48 00-00-5e-00-53-2a`,
	`a.example. 300 IN EUI64 00-00-5e-ef-10-00-00-2a`,
	`a.example. 300 IN SVCB 0 alias.example.`,
	`a.example. 300 IN LOC 52 22 23.000 N 4 53 32.000 E -2.00m 0.00m 10000m 10m`,
	`a.example. 300 IN LOC 42 21 54.500 S 71 06 18.343 W 24.12m 30m 1m 200m`,
	`a.example. 300 IN LOC 0 0 0 N 0 0 0 E 0m 1m 0m 90000000m`,
	`a.example. 300 IN SVCB 1 . alpn="h2,h3" port="853" ipv4hint="192.0.2.1,192.0.2.2" ipv6hint="2001:db8::1" dohpath="/dns-query{?dns}"`,
	`a.example. 300 IN HTTPS 1 . mandatory="alpn,port" alpn="h2" no-default-alpn port="443" ech="AEX+DQBBpQAgACBEYL1m" ohttp key65000="a\034b\\c\000"`,
	`a.example. 300 IN HTTPS 1 svc.example. alpn="h\\\\2,a\\\044b,x y" key667="hello\;world"`,
}

// testMessage builds a response holding rr in its answer section after
// a question for "example.org." (whose name is at offset 12, for
// pointers), packed by miekg/dns with compression.
func testMessage(t testing.TB, rr dns.RR) []byte {
	m := new(dns.Msg)
	m.SetQuestion("example.org.", dns.TypeA)
	m.Response = true
	m.Answer = []dns.RR{rr}
	m.Compress = true
	wire, err := m.Pack()
	if err != nil {
		t.Fatalf("pack %v: %v", rr, err)
	}
	return wire
}

// firstAnswer finds the answer record's owner name offset, type and rdata
// bounds in a message with one question, walking the names by
// UnpackName.
func firstAnswer(t testing.TB, msg []byte) (owner int, rrtype uint16, start, end int) {
	_, off, err := UnpackName(msg, 12)
	if err != nil {
		t.Fatalf("question name: %v", err)
	}
	owner = off + 4
	_, off, err = UnpackName(msg, owner)
	if err != nil || off+10 > len(msg) {
		t.Fatalf("answer header: %v", err)
	}
	rrtype = binary.BigEndian.Uint16(msg[off:])
	start = off + 10
	return owner, rrtype, start, start + int(binary.BigEndian.Uint16(msg[off+8:]))
}

// miekgRdata is the rdata part of miekg/dns's text for rr, as the JSON
// form has shown it.
func miekgRdata(rr dns.RR) string {
	if u, ok := rr.(*dns.RFC3597); ok {
		return `\# ` + strconv.Itoa(len(u.Rdata)/2) + " " + u.Rdata
	}
	return strings.TrimPrefix(rr.String(), rr.Header().String())
}

// checkAgainstMiekg compares the text of the answer in wire with what
// miekg/dns prints after unpacking the same bytes.
func checkAgainstMiekg(t *testing.T, wire []byte) {
	t.Helper()
	m := new(dns.Msg)
	if err := m.Unpack(wire); err != nil {
		t.Fatalf("miekg unpack: %v", err)
	}
	rr := m.Answer[0]
	owner, rrtype, start, end := firstAnswer(t, wire)
	name, _, err := UnpackName(wire, owner)
	if err != nil || name != rr.Header().Name {
		t.Errorf("owner %q, %v; miekg %q", name, err, rr.Header().Name)
	}
	got, err := AppendRdataText([]byte("x"), wire, rrtype, start, end)
	if err != nil {
		t.Fatalf("%s: %v", rr, err)
	}
	if want := "x" + miekgRdata(rr); string(got) != want {
		t.Errorf("%s:\n got %q\nwant %q", dns.TypeToString[rrtype], got, want)
	}
}

func TestRdataTextAgreesWithMiekg(t *testing.T) {
	for _, s := range textSamples {
		rr, err := dns.NewRR(s)
		if err != nil {
			t.Errorf("%s: %v", s, err)
			continue
		}
		if rdataForm(rr.Header().Rrtype) == "" {
			t.Errorf("%s: sample of a type without a form", s)
		}
		checkAgainstMiekg(t, testMessage(t, rr))
	}
}

// Every type read as a list of fields has a sample above.
func TestEveryFormHasASample(t *testing.T) {
	seen := map[uint16]bool{}
	for _, s := range textSamples {
		if rr, err := dns.NewRR(s); err == nil {
			seen[rr.Header().Rrtype] = true
		}
	}
	for ty := 0; ty <= 0xFFFF; ty++ {
		if rdataForm(uint16(ty)) != "" && !seen[uint16(ty)] {
			t.Errorf("%s has a form but no sample", TypeString(uint16(ty)))
		}
	}
}

func TestRdataTextUnknownTypeIsRFC3597(t *testing.T) {
	for _, ty := range []uint16{TypeNULL, 65280, TypeAPL, TypeOPT, 4321} {
		msg := []byte{1, 2, 3, 0xAB}
		got, err := AppendRdataText(nil, msg, ty, 0, 4)
		if err != nil || string(got) != `\# 4 010203ab` {
			t.Errorf("type %d: %q, %v", ty, got, err)
		}
	}
	rr := &dns.RFC3597{Hdr: dns.RR_Header{Name: "a.example.", Rrtype: 65280, Class: dns.ClassINET, Ttl: 5}, Rdata: "c0000201ff"}
	checkAgainstMiekg(t, testMessage(t, rr))
	if got := AppendGenericRdataText(nil, nil); string(got) != `\# 0` {
		t.Errorf("empty: %q", got)
	}
}

// An update's deletion has no rdata: the text is empty, or "\# 0" for a
// type without a form.
func TestRdataTextEmpty(t *testing.T) {
	for ty, want := range map[uint16]string{TypeA: "", TypeMX: "", TypeTXT: "", 65280: `\# 0`} {
		got, err := AppendRdataText([]byte("x"), []byte{0}, ty, 1, 1)
		if err != nil || string(got) != "x"+want {
			t.Errorf("type %d: %q, %v", ty, got, err)
		}
	}
}

// The names of record data are followed through compression pointers
// into the rest of the message.
func TestRdataTextFollowsPointers(t *testing.T) {
	rr, _ := dns.NewRR(`www.example.org. 60 IN MX 10 mail.example.org.`)
	wire := testMessage(t, rr)
	_, _, start, end := firstAnswer(t, wire)
	if !bytes.Contains(wire[start:end], []byte{0xC0, 12}) {
		t.Fatalf("rdata %x not compressed", wire[start:end])
	}
	checkAgainstMiekg(t, wire)
}

func TestSMIMEASplitsLongHex(t *testing.T) {
	for _, n := range []int{511, 512, 513, 1024, 1100} {
		cert := strings.Repeat("ab", n)
		rr, err := dns.NewRR(`a.example. 1 IN SMIMEA 3 1 1 ` + cert)
		if err != nil {
			t.Fatal(err)
		}
		checkAgainstMiekg(t, testMessage(t, rr))
	}
}

func TestUnpackNameFollowsAndRefuses(t *testing.T) {
	// header, then "a.b." at 12, then "c" + pointer to 14 ("b."), then a
	// pointer to itself, then a reserved label type.
	msg := append(make([]byte, 12),
		1, 'a', 1, 'b', 0, // 12
		1, 'c', 0xC0, 14, // 17
		0xC0, 21, // 21: a loop
		0x40, 0, // 23: reserved
		0,         // 25: root
		3, 'x', 0, // 26: past the end
	)
	for _, tc := range []struct {
		off      int
		want     string
		wantNext int
		ok       bool
	}{
		{12, "a.b.", 17, true},
		{17, "c.b.", 21, true},
		{19, "b.", 21, true},
		{25, ".", 26, true},
		{21, "", 0, false},
		{23, "", 0, false},
		{26, "", 0, false},
		{len(msg), "", 0, false},
	} {
		got, next, err := UnpackName(msg, tc.off)
		if (err == nil) != tc.ok {
			t.Errorf("at %d: err %v", tc.off, err)
			continue
		}
		if got != tc.want || next != tc.wantNext {
			t.Errorf("at %d: %q next %d, want %q next %d", tc.off, got, next, tc.want, tc.wantNext)
		}
	}
}

// A name of 255 octets with its final zero is the longest; one more is
// refused, as miekg/dns refuses it.
func TestUnpackNameLength(t *testing.T) {
	long := func(wireLen int) []byte {
		var b []byte
		for len(b)+1 < wireLen {
			l := min(63, wireLen-1-len(b)-1)
			b = append(b, byte(l))
			b = append(b, bytes.Repeat([]byte{'a'}, l)...)
		}
		return append(b, 0)
	}
	for _, n := range []int{254, 255, 256} {
		name := long(n)
		if len(name) != n {
			t.Fatalf("built %d octets, want %d", len(name), n)
		}
		_, _, err := UnpackName(name, 0)
		_, _, merr := dns.UnpackDomainName(name, 0)
		if (err == nil) != (n <= 255) || (err == nil) != (merr == nil) {
			t.Errorf("%d octets: err %v, miekg %v", n, err, merr)
		}
	}
}

// Malformed record data is refused, dst unchanged.
func TestRdataTextRefusesMalformed(t *testing.T) {
	for _, tc := range []struct {
		rrtype uint16
		rdata  string // hex
	}{
		{TypeA, "c00002"},
		{TypeA, "c000020101"},
		{TypeAAAA, "20010db8"},
		{TypeMX, "000a"},
		{TypeMX, "000a0161"},                                 // name without its end
		{TypeMX, "000a00ff"},                                 // trailing byte
		{TypeNS, "c0ff"},                                     // pointer past the rdata
		{TypeTXT, "0561626364"},                              // string longer than the rdata
		{TypeSOA, "0000000000000000"},                        // numbers missing
		{TypeNSEC, "00" + "0000"},                            // empty window
		{TypeNSEC, "00" + "000140" + "000140"},               // a window after itself
		{TypeNSEC, "00" + "0021" + strings.Repeat("00", 33)}, // window too long
		{TypeNSEC, "00" + "000340"},                          // short window
		{TypeNSEC3, "0100000a02aa"},                          // salt past the end
		{TypeCAA, "0005697373"},                              // tag past the end
		{TypeSVCB, "000100000300010035"},                     // port of one octet
		{TypeSVCB, "0001000003000201bb00010000"},             // keys out of order
		{TypeSVCB, "0001000004000300000000"},                 // ipv4hint not a multiple of 4
		{TypeSVCB, "00010000040000"},                         // empty ipv4hint
		{TypeSVCB, "00010000060010" + "00000000000000000000ffffc0000201"}, // IPv4 in ipv6hint
		{TypeSVCB, "00010000020001ff"},                                    // no-default-alpn with a value
		{TypeSVCB, "0001000000000001ff"},                                  // odd mandatory
		{TypeSVCB, "0001" + "00" + "0001" + "0003" + "036832"},            // alpn past its value
		{TypeSVCB, "0001000000"},                                          // short key
		{TypeSVCB, "0001" + "00" + "00ff" + "0005" + "00"},                // value past the end
		{TypeSVCB, "0001000000080001ff"},                                  // ohttp with a value
		{TypeSVCB, "0001000000ffff0000"},                                  // key 65535
	} {
		rdata, err := hex.DecodeString(tc.rdata)
		if err != nil {
			t.Fatal(tc.rdata, err)
		}
		got, err := AppendRdataText([]byte("x"), rdata, tc.rrtype, 0, len(rdata))
		if err == nil || string(got) != "x" {
			t.Errorf("%s %s: %q, %v", TypeString(tc.rrtype), tc.rdata, got, err)
		}
	}
	if _, err := AppendRdataText(nil, []byte{1, 2}, TypeA, 1, 3); err == nil {
		t.Error("end past the message: no error")
	}
}

// Random record data of every type with a form, and of some without:
// whatever miekg/dns refuses is refused, and what both read reads alike.
func TestRdataTextRandomAgainstMiekg(t *testing.T) {
	r := rand.New(rand.NewPCG(18, 4))
	var types []uint16
	for ty := 1; ty < 0x10000; ty++ {
		if rdataForm(uint16(ty)) != "" {
			types = append(types, uint16(ty))
		}
	}
	types = append(types, 65280, TypeNULL)
	for i := 0; i < 20000; i++ {
		ty := types[r.IntN(len(types))]
		rdata := make([]byte, r.IntN(40))
		for j := range rdata {
			rdata[j] = byte(r.IntN(256))
			if r.IntN(3) == 0 { // small numbers make lengths that fit
				rdata[j] = byte(r.IntN(8))
			}
		}
		compareWithMiekg(t, ty, rdata)
	}
}

// compareWithMiekg puts rdata in a one-answer message and checks our text
// against miekg/dns's reading of it.
func compareWithMiekg(t *testing.T, rrtype uint16, rdata []byte) {
	t.Helper()
	if len(rdata) == 0 || len(rdata) > 0xFFFF-64 {
		return // empty record data is tested on its own
	}
	wire := []byte{0, 1, 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0,
		7, 'e', 'x', 'a', 'm', 'p', 'l', 'e', 3, 'o', 'r', 'g', 0, 0, 1, 0, 1,
		0xC0, 12}
	wire = binary.BigEndian.AppendUint16(wire, rrtype)
	wire = append(wire, 0, 1, 0, 0, 1, 0)
	wire = binary.BigEndian.AppendUint16(wire, uint16(len(rdata)))
	start := len(wire)
	wire = append(wire, rdata...)
	got, err := AppendRdataText(nil, wire, rrtype, start, len(wire))

	m := new(dns.Msg)
	merr := m.Unpack(wire)
	_, known := dns.TypeToRR[rrtype]
	if merr != nil {
		// A type miekg/dns reads but we show generically reads here
		// whatever its data.
		if err == nil && (rdataForm(rrtype) != "" || !known) {
			t.Errorf("%s %x: miekg refuses (%v), we read %q", TypeString(rrtype), rdata, merr, got)
		}
		return
	}
	rr := m.Answer[0]
	_, generic := rr.(*dns.RFC3597)
	if rdataForm(rrtype) == "" && !generic {
		return // miekg/dns has a form we do not
	}
	if err != nil {
		// miekg/dns stops at the end of the data between two fields and
		// leaves the rest empty; we refuse a record without its fields.
		return
	}
	if want := miekgRdata(rr); string(got) != want {
		t.Errorf("%s %x:\n got %q\nwant %q", TypeString(rrtype), rdata, got, want)
	}
}

func FuzzRdataText(f *testing.F) {
	for _, s := range textSamples {
		rr, _ := dns.NewRR(s)
		wire := testMessage(f, rr)
		_, ty, start, end := firstAnswer(f, wire)
		f.Add(ty, wire[start:end])
	}
	f.Add(uint16(TypeMX), []byte{0, 10, 0xC0, 12})
	f.Fuzz(func(t *testing.T, rrtype uint16, rdata []byte) {
		compareWithMiekg(t, rrtype, rdata)
	})
}

func FuzzUnpackName(f *testing.F) {
	f.Add([]byte{3, 'a', 'b', 'c', 0xC0, 0}, 4)
	f.Add([]byte{1, '.', 1, 0xFF, 0}, 0)
	f.Fuzz(func(t *testing.T, msg []byte, off int) {
		if off < 0 || off >= len(msg) {
			return
		}
		got, next, err := UnpackName(msg, off)
		want, mnext, merr := dns.UnpackDomainName(msg, off)
		if (err == nil) != (merr == nil) {
			t.Fatalf("%x at %d: err %v, miekg %v", msg, off, err, merr)
		}
		if err == nil && (got != want || next != mnext) {
			t.Fatalf("%x at %d: %q next %d, miekg %q next %d", msg, off, got, next, want, mnext)
		}
	})
}

func TestTypeFromStringAsMiekg(t *testing.T) {
	for s, want := range dns.StringToType {
		if got, ok := TypeFromString(s); !ok || got != want {
			t.Errorf("%q: %d %v, want %d", s, got, ok, want)
		}
	}
	for _, s := range []string{"", "aaaa", "TYPE1", "A ", "NOPE"} {
		if got, ok := TypeFromString(s); ok {
			t.Errorf("%q read as %d", s, got)
		}
	}
}
