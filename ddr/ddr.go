// Package ddr answers Discovery of Designated Resolvers (RFC 9462): a
// query for _dns.resolver.arpa SVCB gets the encrypted resolvers this
// server runs — DoH with alpn=h2 and its dohpath, DoT with alpn=dot — so
// that an operating system that found it as a plain DNS server upgrades by
// itself. Building the records and answering are pure functions; Resolver
// puts the answer in front of another resolver.
package ddr

import (
	"net"
	"net/netip"
	"strings"

	"github.com/miekg/dns"
)

// Name is the owner of the designation records (RFC 9462, section 4).
const Name = "_dns.resolver.arpa."

// zone is the special-use domain DDR lives in; no name in it is forwarded.
const zone = "resolver.arpa."

// TTL of the designation: short, since a reload may change it.
const TTL = 300

// Protocol is an encrypted DNS protocol.
type Protocol uint8

const (
	DoH Protocol = iota // DNS over HTTPS, RFC 8484 (alpn=h2)
	DoT                 // DNS over TLS, RFC 7858 (alpn=dot)
)

// Endpoint is one encrypted listener as clients reach it.
type Endpoint struct {
	Protocol Protocol
	Port     uint16
	// Path is the DoH path, e.g. "/dns-query"; the dohpath parameter is
	// its URI template, Path + "{?dns}".
	Path string
}

// Designation is what this server advertises.
type Designation struct {
	// Names are the resolver's names: each is the target of one record
	// per endpoint, and the name clients check the certificate against.
	Names []string
	// Addresses go in the ipv4hint and ipv6hint parameters and, as A and
	// AAAA records of the names, in the additional section.
	Addresses []netip.Addr
	Endpoints []Endpoint
}

// Records are the SVCB records of d, in priority order: for each name its
// endpoints as listed, priorities counting up from 1.
func Records(d Designation) (answer, additional []dns.RR) {
	var v4, v6 []net.IP
	for _, a := range d.Addresses {
		a = a.Unmap()
		if a.Is4() {
			v4 = append(v4, a.AsSlice())
		} else {
			v6 = append(v6, a.AsSlice())
		}
	}
	prio := uint16(0)
	for _, name := range d.Names {
		target := dns.Fqdn(strings.ToLower(name))
		for _, e := range d.Endpoints {
			prio++
			rr := &dns.SVCB{
				Hdr:      dns.RR_Header{Name: Name, Rrtype: dns.TypeSVCB, Class: dns.ClassINET, Ttl: TTL},
				Priority: prio,
				Target:   target,
			}
			switch e.Protocol {
			case DoH:
				rr.Value = append(rr.Value, &dns.SVCBAlpn{Alpn: []string{"h2"}}, &dns.SVCBPort{Port: e.Port})
			case DoT:
				rr.Value = append(rr.Value, &dns.SVCBAlpn{Alpn: []string{"dot"}}, &dns.SVCBPort{Port: e.Port})
			}
			if len(v4) > 0 {
				rr.Value = append(rr.Value, &dns.SVCBIPv4Hint{Hint: v4})
			}
			if len(v6) > 0 {
				rr.Value = append(rr.Value, &dns.SVCBIPv6Hint{Hint: v6})
			}
			if e.Protocol == DoH {
				rr.Value = append(rr.Value, &dns.SVCBDoHPath{Template: e.Path + "{?dns}"})
			}
			answer = append(answer, rr)
		}
		for _, a := range d.Addresses {
			hdr := dns.RR_Header{Name: target, Class: dns.ClassINET, Ttl: TTL}
			if a = a.Unmap(); a.Is4() {
				hdr.Rrtype = dns.TypeA
				additional = append(additional, &dns.A{Hdr: hdr, A: a.AsSlice()})
			} else {
				hdr.Rrtype = dns.TypeAAAA
				additional = append(additional, &dns.AAAA{Hdr: hdr, AAAA: a.AsSlice()})
			}
		}
	}
	return answer, additional
}

// Table is the designation as records, built once.
type Table struct {
	answer, additional []dns.RR
}

// NewTable builds d's records.
func NewTable(d Designation) *Table {
	t := new(Table)
	t.answer, t.additional = Records(d)
	return t
}

// Answer returns the local answer to q when its question is in
// resolver.arpa, and nil otherwise: _dns.resolver.arpa SVCB gets the
// table's records; other types there, and resolver.arpa itself, NODATA;
// other names NXDOMAIN (RFC 9462, section 6.4: these names are never
// forwarded). A nil table answers NODATA: no designation.
func (t *Table) Answer(q *dns.Msg) *dns.Msg {
	if len(q.Question) != 1 {
		return nil
	}
	qs := q.Question[0]
	name := strings.ToLower(qs.Name)
	if !dns.IsSubDomain(zone, name) {
		return nil
	}
	m := new(dns.Msg)
	m.SetReply(q)
	m.Authoritative = true
	m.RecursionAvailable = true
	switch {
	case name == Name && qs.Qtype == dns.TypeSVCB && qs.Qclass == dns.ClassINET && t != nil:
		// Capped, so that whoever appends to the sections copies them.
		m.Answer = t.answer[:len(t.answer):len(t.answer)]
		m.Extra = t.additional[:len(t.additional):len(t.additional)]
	case name == Name || name == zone:
	default:
		m.Rcode = dns.RcodeNameError
	}
	if o := q.IsEdns0(); o != nil {
		m.SetEdns0(dns.DefaultMsgSize, o.Do())
	}
	return m
}
