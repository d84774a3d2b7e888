package engine_test

import (
	"testing"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/engine"
)

// The error answer to a query keeps what a client matches it by (ID,
// opcode, question) and what it asked for (RD, CD, EDNS), and carries an
// OPT record for an extended rcode.
func TestAppendErrorReply(t *testing.T) {
	withOPT := func(m *dns.Msg) *dns.Msg { m.SetEdns0(1232, true); return m }
	q := func(name string) *dns.Msg {
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeA)
		m.Id, m.CheckingDisabled = 4321, true
		return m
	}
	pack := func(m *dns.Msg) []byte {
		b, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	notify := q("zone.example.")
	notify.Opcode = dns.OpcodeNotify
	two := q("a.example.")
	two.Question = append(two.Question, dns.Question{Name: "b.example.", Qtype: dns.TypeA, Qclass: dns.ClassINET})
	badvers := withOPT(q("v.example."))
	cut := pack(withOPT(q("cut.example.")))
	cut = cut[:len(cut)-3] // the OPT record runs past the end
	for _, c := range []struct {
		name     string
		raw      []byte
		rcode    int
		question string // "" for none
		opt      bool
	}{
		{"NOTIMP keeps opcode, question and OPT", pack(withOPT(notify)), dns.RcodeNotImplemented, "zone.example.", true},
		{"FORMERR without one question: header only", pack(withOPT(two)), dns.RcodeFormatError, "", false},
		{"BADVERS: OPT with the extended rcode", pack(badvers), dns.RcodeBadVers, "v.example.", true},
		{"records cut short: question, no OPT", cut, dns.RcodeFormatError, "cut.example.", false},
		{"no OPT asked, none given", pack(q("plain.example.")), dns.RcodeFormatError, "plain.example.", false},
	} {
		out := engine.AppendErrorReply([]byte("dst"), c.raw, c.rcode)
		if string(out[:3]) != "dst" {
			t.Fatalf("%s: dst not kept", c.name)
		}
		m := new(dns.Msg)
		if err := m.Unpack(out[3:]); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		want := new(dns.Msg)
		_ = want.Unpack(c.raw) // the header at least
		if m.Id != 4321 || !m.Response || !m.RecursionAvailable || !m.RecursionDesired || !m.CheckingDisabled ||
			m.Opcode != want.Opcode || m.Rcode != c.rcode {
			t.Errorf("%s: header %v", c.name, m.MsgHdr)
		}
		if got := len(m.Question) == 1 && m.Question[0].Name == c.question; c.question != "" && !got || c.question == "" && len(m.Question) != 0 {
			t.Errorf("%s: question %v, want %q", c.name, m.Question, c.question)
		}
		if (m.IsEdns0() != nil) != c.opt {
			t.Errorf("%s: OPT %v, want %v", c.name, m.IsEdns0(), c.opt)
		}
	}
}

func TestWantsPaddingReadsTheWireQuery(t *testing.T) {
	m := new(dns.Msg)
	m.SetQuestion("p.example.", dns.TypeA)
	plain, _ := m.Pack()
	m.SetEdns0(1232, false)
	edns, _ := m.Pack()
	m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_PADDING{Padding: make([]byte, 8)})
	padded, _ := m.Pack()
	if engine.WantsPadding(plain) || engine.WantsPadding(edns) || !engine.WantsPadding(padded) {
		t.Fatal("WantsPadding: only the query with a Padding option wants it")
	}
	reply := append([]byte("x"), edns...) // its OPT record is last
	out := engine.PadReply(reply, 1)
	if (len(out)-1)%engine.PaddingBlock != 0 {
		t.Fatalf("padded to %d bytes", len(out)-1)
	}
	if err := new(dns.Msg).Unpack(out[1:]); err != nil {
		t.Fatal(err)
	}
}
