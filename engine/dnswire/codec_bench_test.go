package dnswire_test

import (
	"testing"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/engine/dnswire"
)

// The wire codec against miekg/dns on what the forwarder does per
// question (the design note in doc.go quotes these):
//
//	go test -run '^$' -bench Codec -benchmem ./engine/dnswire/
//
// ReadReply reads an upstream reply as the engine reads it (header, the
// question's name and type, every record's section, type and TTL) against
// miekg/dns's Unpack, which a forwarder on miekg/dns does first; CheckQuery
// is the front ends' query check against Unpack of the query; BuildQuery
// writes a query with EDNS against SetQuestion, SetEdns0 and Pack.

func benchReply(b *testing.B) []byte {
	m := new(dns.Msg)
	m.SetQuestion("www.example.com.", dns.TypeA)
	m.Response, m.Compress, m.RecursionAvailable = true, true, true
	for _, s := range []string{"www.example.com. 300 IN CNAME web.example.com.",
		"web.example.com. 60 IN A 192.0.2.1", "web.example.com. 60 IN A 192.0.2.2",
		"web.example.com. 60 IN A 192.0.2.3", "web.example.com. 60 IN A 192.0.2.4"} {
		rr, err := dns.NewRR(s)
		if err != nil {
			b.Fatal(err)
		}
		m.Answer = append(m.Answer, rr)
	}
	m.SetEdns0(1232, true)
	wire, err := m.Pack()
	if err != nil {
		b.Fatal(err)
	}
	return wire
}

func BenchmarkCodecReadReply(b *testing.B) {
	wire := benchReply(b)
	b.Run("dnswire", func(b *testing.B) {
		b.ReportAllocs()
		var name [dnswire.MaxNameLen]byte
		for b.Loop() {
			p, _ := dnswire.NewParser(wire)
			q, _ := p.Question()
			if _, _, err := dnswire.AppendNameWire(name[:0], wire, q.NameOff); err != nil {
				b.Fatal(err)
			}
			minTTL := ^uint32(0)
			for {
				rr, ok := p.Next()
				if !ok {
					break
				}
				if rr.Type != dnswire.TypeOPT {
					minTTL = min(minTTL, rr.TTL)
				}
			}
			if p.Err() != nil || minTTL != 60 {
				b.Fatal(p.Err(), minTTL)
			}
		}
	})
	b.Run("miekg", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m := new(dns.Msg)
			if err := m.Unpack(wire); err != nil {
				b.Fatal(err)
			}
			minTTL := ^uint32(0)
			for _, rr := range m.Answer {
				minTTL = min(minTTL, rr.Header().Ttl)
			}
			if minTTL != 60 {
				b.Fatal(minTTL)
			}
		}
	})
}

func BenchmarkCodecCheckQuery(b *testing.B) {
	q := new(dns.Msg)
	q.SetQuestion("www.example.com.", dns.TypeAAAA)
	q.SetEdns0(1232, true)
	wire, _ := q.Pack()
	b.Run("dnswire", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if c := dnswire.CheckQuery(wire); c.Verdict != dnswire.Accepted {
				b.Fatal(c.Problem)
			}
		}
	})
	b.Run("miekg", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m := new(dns.Msg)
			if err := m.Unpack(wire); err != nil || len(m.Question) != 1 {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkCodecBuildQuery(b *testing.B) {
	b.Run("dnswire", func(b *testing.B) {
		b.ReportAllocs()
		var name [dnswire.MaxNameLen]byte
		buf := make([]byte, 0, 512)
		for b.Loop() {
			wire, err := dnswire.PackName(name[:0], "www.example.com.")
			if err != nil {
				b.Fatal(err)
			}
			m := dnswire.NewBuilder(buf[:0], dnswire.Header{ID: 1, Flags: dnswire.FlagRD})
			m.Question(wire, dnswire.TypeAAAA, dnswire.ClassINET)
			m.OPT(1232, dnswire.EDNSFlagDO, nil)
			if _, err := m.Finish(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("miekg", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 512)
		for b.Loop() {
			m := new(dns.Msg)
			m.SetQuestion("www.example.com.", dns.TypeAAAA)
			m.Id = 1
			m.SetEdns0(1232, true)
			if _, err := m.PackBuffer(buf); err != nil {
				b.Fatal(err)
			}
		}
	})
}
