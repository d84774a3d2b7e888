package dnswire_test

import (
	"testing"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/engine/dnswire"
)

// FuzzParserAsMiekg: whatever miekg/dns unpacks, the parser reads record
// for record (type, class, TTL), and a copy rebuilt with CopyRR unpacks
// to the same message.
func FuzzParserAsMiekg(f *testing.F) {
	m := new(dns.Msg)
	m.SetQuestion("www.example.com.", dns.TypeA)
	m.Response, m.Compress = true, true
	for _, s := range []string{"www.example.com. 300 IN CNAME web.example.com.", "web.example.com. 60 IN A 192.0.2.1",
		"example.com. 60 IN MX 10 mail.example.com.", "example.com. 900 IN SOA ns.example.com. h.example.com. 1 2 3 4 5"} {
		rr, _ := dns.NewRR(s)
		m.Answer = append(m.Answer, rr)
	}
	m.SetEdns0(1232, true)
	seed, _ := m.Pack()
	f.Add(seed)
	f.Fuzz(func(t *testing.T, wire []byte) {
		want := new(dns.Msg)
		if want.Unpack(wire) != nil {
			return
		}
		p, ok := dnswire.NewParser(wire)
		if !ok {
			t.Fatal("miekg/dns read a header the parser did not")
		}
		h := p.Header()
		if int(h.Counts[0]) != len(want.Question) || int(h.Counts[1]) != len(want.Answer) ||
			int(h.Counts[2]) != len(want.Ns) || int(h.Counts[3]) != len(want.Extra)+btoi(want.IsEdns0() != nil) {
			return // miekg/dns stops quietly where a message ends before its counts do
		}
		b := dnswire.NewBuilder(nil, h)
		for range want.Question {
			at := p.Offset()
			q, ok := p.Question()
			if !ok {
				if end := dnswire.SkipName(wire, at); end >= 0 && end+4 > len(wire) {
					return // miekg/dns lets a message end before a question's type and class
				}
				t.Fatalf("question: %v", p.Err())
			}
			name, err := dnswire.QuestionName(wire, q)
			if err != nil {
				t.Fatalf("question name: %v", err)
			}
			b.Question(name, q.Type, q.Class)
		}
		all := append(append(append([]dns.RR{}, want.Answer...), want.Ns...), want.Extra...)
		i := 0
		for {
			rr, ok := p.Next()
			if !ok {
				break
			}
			if i >= len(all) {
				t.Fatalf("more records than miekg/dns read")
			}
			wh := all[i].Header()
			if rr.Type != wh.Rrtype || rr.Type != dns.TypeOPT && (rr.Class != wh.Class || rr.TTL != wh.Ttl) {
				t.Fatalf("record %d: %+v, miekg/dns %v", i, rr, all[i])
			}
			if err := b.CopyRR(rr.Section, wire, rr); err != nil {
				t.Fatalf("record %d: %v", i, err)
			}
			i++
		}
		if p.Err() != nil || i != len(all) {
			t.Fatalf("read %d of %d records: %v", i, len(all), p.Err())
		}
		out, err := b.Finish()
		if err != nil {
			return // a copy past 65535 bytes
		}
		got := new(dns.Msg)
		if err := got.Unpack(out); err != nil {
			t.Fatalf("the copy does not unpack: %v", err)
		}
		if got.String() != want.String() {
			t.Fatalf("copy:\n%v\nwant:\n%v", got, want)
		}
	})
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
