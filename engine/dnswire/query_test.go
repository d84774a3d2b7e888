package dnswire

import (
	"strings"
	"testing"
)

// ParseQuestion reads a name and type as the JSON form and /explain give
// them, and the query built of them gets CheckQuery's verdict: a meta
// type is refused with the rcode RefusedType gives it on the wire.
func TestParseQuestionThenCheckQuery(t *testing.T) {
	name253 := strings.Repeat(strings.Repeat("a", 62)+".", 4) + "a" // 4*63+1 characters
	for _, tc := range []struct {
		name, qtype string
		wantType    uint16
		verdict     Verdict // of the query built; Unreadable: ParseQuestion refuses
		rcode       int
	}{
		{"example.org", "", TypeA, Accepted, 0},
		{"Example.ORG.", "aaaa", TypeAAAA, Accepted, 0},
		{"example.org", "TYPE28", TypeAAAA, Accepted, 0},
		{"example.org", "type28", TypeAAAA, Accepted, 0},
		{"example.org", "28", TypeAAAA, Accepted, 0},
		{"example.org", "TYPE65280", 65280, Accepted, 0},
		{".", "NS", TypeNS, Accepted, 0},
		{`a\.b.example`, "TXT", TypeTXT, Accepted, 0},
		{name253, "A", TypeA, Accepted, 0},
		{name253 + ".", "A", TypeA, Accepted, 0},
		{name253 + "a", "A", 0, Unreadable, 0},
		{"example.org", "AXFR", TypeAXFR, Refused, RcodeNotImplemented},
		{"example.org", "ixfr", TypeIXFR, Refused, RcodeNotImplemented},
		{"example.org", "MAILA", TypeMAILA, Refused, RcodeNotImplemented},
		{"example.org", "TYPE254", TypeMAILA, Refused, RcodeNotImplemented},
		{"example.org", "opt", TypeOPT, Refused, RcodeFormatError},
		{"example.org", "250", TypeTSIG, Refused, RcodeFormatError},
		{"example.org", "TKEY", TypeTKEY, Refused, RcodeFormatError},
		{"", "A", 0, Unreadable, 0},
		{"a..b", "A", 0, Unreadable, 0},
		{".a", "A", 0, Unreadable, 0},
		{strings.Repeat("a", 64) + ".org", "A", 0, Unreadable, 0},
		{"example.org", "0", 0, Unreadable, 0},
		{"example.org", "TYPE0", 0, Unreadable, 0},
		{"example.org", "TYPE65536", 0, Unreadable, 0},
		{"example.org", "65536", 0, Unreadable, 0},
		{"example.org", "NOPE", 0, Unreadable, 0},
		{"example.org", "-1", 0, Unreadable, 0},
	} {
		wire, fqdn, qtype, err := ParseQuestion(nil, tc.name, tc.qtype)
		if tc.verdict == Unreadable {
			if err == nil {
				t.Errorf("%q %q: read as %q %d, want an error", tc.name, tc.qtype, fqdn, qtype)
			}
			continue
		}
		if err != nil || qtype != tc.wantType || fqdn != Fqdn(tc.name) {
			t.Errorf("%q %q: %q %d %v, want %q %d", tc.name, tc.qtype, fqdn, qtype, err, Fqdn(tc.name), tc.wantType)
			continue
		}
		b := NewBuilder(nil, Header{ID: 1, Flags: FlagRD})
		b.Question(wire, qtype, ClassINET)
		raw, err := b.Finish()
		if err != nil {
			t.Fatal(err)
		}
		c := CheckQuery(raw)
		if c.Verdict != tc.verdict || c.Verdict == Refused && c.Rcode != tc.rcode || c.Type != qtype {
			t.Errorf("%q %q: CheckQuery %+v, want %v rcode %d", tc.name, tc.qtype, c, tc.verdict, tc.rcode)
		}
		if got, _, _ := UnpackName(raw, c.NameOff); got != fqdn {
			t.Errorf("%q: CheckQuery's name %q", tc.name, got)
		}
	}
}

// CheckQuery on queries that come only on the wire.
func TestCheckQueryWire(t *testing.T) {
	q := func(flags uint16, qd uint16, tail ...byte) []byte {
		m := AppendHeader(nil, Header{ID: 7, Flags: flags, Counts: [4]uint16{qd, 0, 0, 0}})
		return append(m, tail...)
	}
	question := []byte{3, 'w', 'w', 'w', 0, 0, 1, 0, 1}
	long := []byte{}
	for range 4 {
		long = append(long, 63)
		long = append(long, strings.Repeat("a", 63)...)
	}
	long = append(long, 0, 0, 1, 0, 1) // 4*64+1 = 257 octets
	for _, tc := range []struct {
		what    string
		raw     []byte
		verdict Verdict
		rcode   int
	}{
		{"plain", q(FlagRD, 1, question...), Accepted, 0},
		{"short", []byte{0, 1, 2}, Unreadable, 0},
		{"response", q(FlagQR, 1, question...), Unreadable, 0},
		{"QDCOUNT 0", q(0, 0), Unreadable, 0},
		{"QDCOUNT 2", q(0, 2, append(question, question...)...), Unreadable, 0},
		{"name of 257 octets", q(0, 1, long...), Unreadable, 0},
		{"question cut", q(0, 1, question[:6]...), Unreadable, 0},
		{"NOTIFY", q(Flags(OpcodeNotify, 0, 0), 1, question...), Refused, RcodeNotImplemented},
		{"NOTIFY without a question", q(Flags(OpcodeNotify, 0, 0), 0), Refused, RcodeNotImplemented},
	} {
		c := CheckQuery(tc.raw)
		if c.Verdict != tc.verdict || c.Verdict == Refused && c.Rcode != tc.rcode || c.Verdict != Accepted && c.Problem == "" {
			t.Errorf("%s: %+v, want %v rcode %d and a problem", tc.what, c, tc.verdict, tc.rcode)
		}
	}
}

// CheckQuery allocates nothing: Do53 and DoH run it on every query that
// is not plain.
func TestCheckQueryAllocatesNothing(t *testing.T) {
	b := NewBuilder(nil, Header{Flags: FlagRD})
	name, _ := PackName(nil, "www.example.org.")
	b.Question(name, TypeAAAA, ClassINET)
	b.OPT(1232, EDNSFlagDO, AppendOption(nil, EDNS0PADDING, make([]byte, 20)))
	raw, _ := b.Finish()
	if n := testing.AllocsPerRun(100, func() { CheckQuery(raw) }); n != 0 {
		t.Errorf("%v allocations", n)
	}
}
