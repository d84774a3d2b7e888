package doh

import (
	"net/http"
	"testing"

	"github.com/miekg/dns"
)

// FuzzCheckQuery feeds arbitrary bytes to the wire path: checking, and
// for what passes, packing an error reply or a padded answer. It must
// never panic, and a query it passes must be one the resolver can take.
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
		q, reply, status, problem := checkQuery(raw)
		// The byte-level reading passes only what checkQuery passes as it
		// is, with the same question.
		if name, qtype, ok := plainQuery(raw); ok {
			if status != http.StatusOK || reply != nil || q == nil || len(q.Question) != 1 {
				t.Fatalf("plainQuery passed what checkQuery answers %d %q", status, problem)
			}
			if qs := q.Question[0]; qs.Name != name || qs.Qtype != qtype {
				t.Fatalf("plainQuery read %q/%d, checkQuery %q/%d", name, qtype, qs.Name, qs.Qtype)
			}
		}
		switch {
		case status != http.StatusOK:
			if problem == "" || reply != nil {
				t.Fatalf("status %d with problem %q reply %v", status, problem, reply)
			}
		case reply != nil:
			if _, err := packReply(reply, q, nil); err != nil {
				t.Fatalf("error reply does not pack: %v", err)
			}
		default:
			if q == nil || len(q.Question) != 1 || q.Response || q.Opcode != dns.OpcodeQuery {
				t.Fatalf("passed a query the resolver cannot take: %v", q)
			}
			r := new(dns.Msg)
			r.SetReply(q)
			if _, err := packReply(r, q, nil); err != nil && !q.Compress {
				t.Logf("answer does not pack: %v", err) // names from the query may be unpackable
			}
		}
	})
}
