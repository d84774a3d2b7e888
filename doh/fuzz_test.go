package doh

import (
	"net/http"
	"testing"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/engine"
)

// FuzzCheckQuery feeds arbitrary bytes to the wire path: checking, and
// for a DNS error, making its reply. It must never panic, and a query it
// passes must have the question miekg/dns reads.
func FuzzCheckQuery(f *testing.F) {
	q := new(dns.Msg)
	q.SetQuestion("example.org.", dns.TypeA)
	seed, _ := q.Pack()
	f.Add(seed)
	q.SetEdns0(1232, true)
	q.IsEdns0().Option = append(q.IsEdns0().Option, &dns.EDNS0_PADDING{Padding: make([]byte, 8)})
	padded, _ := q.Pack()
	f.Add(padded)
	f.Add([]byte{0, 0, 0x28, 0, 0, 1, 0, 0, 0, 0, 0, 0}) // UPDATE
	f.Add([]byte{0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xC0, 0x0C, 0, 1, 0, 1})
	f.Fuzz(func(t *testing.T, raw []byte) {
		c := checkQuery(raw)
		// The byte-level reading passes only what checkQuery passes as it
		// is, with the same question.
		if name, qtype, ok := plainQuery(raw); ok {
			if c.status != http.StatusOK || c.rcode >= 0 || c.qname != name || c.qtype != qtype {
				t.Fatalf("plainQuery read %q/%d, checkQuery %+v", name, qtype, c)
			}
		}
		switch {
		case c.status != http.StatusOK:
			if c.problem == "" || c.rcode >= 0 {
				t.Fatalf("status %d with problem %q rcode %d", c.status, c.problem, c.rcode)
			}
		case c.rcode >= 0:
			reply := engine.AppendErrorReply(nil, raw, c.rcode)
			if engine.WantsPadding(raw) {
				reply = engine.PadReply(reply, 0)
			}
			m := new(dns.Msg)
			if err := m.Unpack(reply); err != nil || m.Rcode != c.rcode || !m.Response {
				t.Fatalf("error reply %x reads %v, %v", reply, m, err)
			}
		default:
			// Ready for the resolver: the question miekg/dns reads.
			name, off, err := dns.UnpackDomainName(raw, headerSize)
			if err != nil || name != c.qname || off+4 > len(raw) || uint16(raw[off])<<8|uint16(raw[off+1]) != c.qtype {
				t.Fatalf("ready with %q %d; miekg/dns reads %q (%v)", c.qname, c.qtype, name, err)
			}
		}
	})
}
