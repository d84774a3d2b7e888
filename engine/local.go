package engine

import (
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/dnswire"
)

// localTTL is the TTL of local answers: short, since hosts change on reload.
const localTTL = 60

// Names answered without asking upstream (RFC 6761).
const (
	localhostDomain = "localhost."
	invalidDomain   = "invalid."
	ptrLocalhostV4  = "1.0.0.127.in-addr.arpa."
	ptrLocalhostV6  = "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.ip6.arpa."
)

// localNames answers the names the engine knows itself: RFC 6761's
// localhost and invalid, and the configured static hosts.
//
// For a hosts name, A and AAAA get its addresses of that family and any
// other type (MX, TXT, HTTPS, ...) NODATA: the name exists, and asking
// upstream could only contradict the operator's entry.
type localNames struct {
	addrs map[string][]netip.Addr // lowercased name → addresses
	ptrs  map[string][]string     // lowercased reverse name → names
}

// buildLocal reads hosts (name → addresses).
func buildLocal(hosts map[string][]string) (*localNames, error) {
	l := &localNames{addrs: map[string][]netip.Addr{}, ptrs: map[string][]string{}}
	// Sorted, so the PTR records of an address shared by names come in
	// the same order on every reload.
	for _, name := range slices.Sorted(maps.Keys(hosts)) {
		fqdn, err := ParseHostName(name)
		if err != nil {
			return nil, err
		}
		for _, s := range hosts[name] {
			a, err := ParseHostAddress(name, s)
			if err != nil {
				return nil, err
			}
			if !slices.Contains(l.addrs[fqdn], a) {
				l.addrs[fqdn] = append(l.addrs[fqdn], a)
			}
			rev, _ := dns.ReverseAddr(a.String())
			if !slices.Contains(l.ptrs[rev], fqdn) {
				l.ptrs[rev] = append(l.ptrs[rev], fqdn)
			}
		}
	}
	return l, nil
}

// answer returns the local reply to client's question asked as name, or
// nil when name is not local. Only class IN is answered locally.
func (l *localNames) answer(cq *clientQuery, name string) *dns.Msg {
	if cq.qclass != dnswire.ClassINET {
		return nil
	}
	q := dns.Question{Name: cq.name, Qtype: cq.qtype, Qclass: cq.qclass}
	switch {
	case inDomain(name, invalidDomain):
		return localReply(cq, dnswire.RcodeNameError)
	case inDomain(name, localhostDomain):
		m := localReply(cq, dnswire.RcodeSuccess)
		switch q.Qtype {
		case dnswire.TypeA:
			m.Answer = append(m.Answer, &dns.A{Hdr: localHdr(name, dnswire.TypeA), A: netip.MustParseAddr("127.0.0.1").AsSlice()})
		case dnswire.TypeAAAA:
			m.Answer = append(m.Answer, &dns.AAAA{Hdr: localHdr(name, dnswire.TypeAAAA), AAAA: netip.IPv6Loopback().AsSlice()})
		}
		return m
	}
	if q.Qtype == dnswire.TypePTR && (strings.EqualFold(name, ptrLocalhostV4) || strings.EqualFold(name, ptrLocalhostV6)) {
		m := localReply(cq, dnswire.RcodeSuccess)
		m.Answer = append(m.Answer, &dns.PTR{Hdr: localHdr(name, dnswire.TypePTR), Ptr: localhostDomain})
		return m
	}
	if len(l.addrs) == 0 {
		return nil
	}
	key := strings.ToLower(name)
	if q.Qtype == dnswire.TypePTR {
		if targets, ok := l.ptrs[key]; ok {
			m := localReply(cq, dnswire.RcodeSuccess)
			for _, t := range targets {
				m.Answer = append(m.Answer, &dns.PTR{Hdr: localHdr(name, dnswire.TypePTR), Ptr: t})
			}
			return m
		}
	}
	addrs, ok := l.addrs[key]
	if !ok {
		return nil
	}
	m := localReply(cq, dnswire.RcodeSuccess)
	for _, a := range addrs {
		switch {
		case q.Qtype == dnswire.TypeA && a.Is4():
			m.Answer = append(m.Answer, &dns.A{Hdr: localHdr(name, dnswire.TypeA), A: a.AsSlice()})
		case q.Qtype == dnswire.TypeAAAA && a.Is6():
			m.Answer = append(m.Answer, &dns.AAAA{Hdr: localHdr(name, dnswire.TypeAAAA), AAAA: a.AsSlice()})
		}
	}
	return m
}

// localReply is a reply to client with rcode and no records yet: RA set,
// and an OPT record when the client sent one.
func localReply(cq *clientQuery, rcode int) *dns.Msg {
	m := new(dns.Msg)
	m.Id, m.Response, m.Opcode, m.Rcode = cq.id, true, dnswire.OpcodeQuery, rcode
	m.RecursionDesired, m.CheckingDisabled, m.RecursionAvailable = cq.rd, cq.cd, true
	m.Question = []dns.Question{{Name: cq.name, Qtype: cq.qtype, Qclass: cq.qclass}}
	if cq.opt {
		m.SetEdns0(upstreamUDPSize, cq.do)
	}
	return m
}

func localHdr(name string, t uint16) dns.RR_Header {
	return dns.RR_Header{Name: name, Rrtype: t, Class: dnswire.ClassINET, Ttl: localTTL}
}
