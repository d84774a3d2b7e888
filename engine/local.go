package engine

import (
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/dohfwd/dohfwd/engine/dnswire"
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
			rev := dnswire.ReverseAddr(a)
			if !slices.Contains(l.ptrs[rev], fqdn) {
				l.ptrs[rev] = append(l.ptrs[rev], fqdn)
			}
		}
	}
	return l, nil
}

// answer returns the local reply to client's question asked as name, or
// nil when name is not local. Only class IN is answered locally. The
// reply has ID 0: appendMade writes the client's.
func (l *localNames) answer(cq *clientQuery, name string) []byte {
	if cq.qclass != dnswire.ClassINET {
		return nil
	}
	switch {
	case inDomain(name, invalidDomain):
		r := startLocal(cq, dnswire.RcodeNameError)
		return r.finish(cq)
	case inDomain(name, localhostDomain):
		r := startLocal(cq, dnswire.RcodeSuccess)
		switch cq.qtype {
		case dnswire.TypeA:
			r.addr(cq, name, netip.AddrFrom4([4]byte{127, 0, 0, 1}))
		case dnswire.TypeAAAA:
			r.addr(cq, name, netip.IPv6Loopback())
		}
		return r.finish(cq)
	}
	if cq.qtype == dnswire.TypePTR && (strings.EqualFold(name, ptrLocalhostV4) || strings.EqualFold(name, ptrLocalhostV6)) {
		r := startLocal(cq, dnswire.RcodeSuccess)
		r.ptr(cq, name, localhostDomain)
		return r.finish(cq)
	}
	if len(l.addrs) == 0 {
		return nil
	}
	key := strings.ToLower(name)
	if cq.qtype == dnswire.TypePTR {
		if targets, ok := l.ptrs[key]; ok {
			r := startLocal(cq, dnswire.RcodeSuccess)
			for _, t := range targets {
				r.ptr(cq, name, t)
			}
			return r.finish(cq)
		}
	}
	addrs, ok := l.addrs[key]
	if !ok {
		return nil
	}
	r := startLocal(cq, dnswire.RcodeSuccess)
	for _, a := range addrs {
		if cq.qtype == dnswire.TypeA && a.Is4() || cq.qtype == dnswire.TypeAAAA && a.Is6() {
			r.addr(cq, name, a)
		}
	}
	return r.finish(cq)
}

// localReply is a local reply being built: RA set, the client's question,
// then its records.
type localReply struct{ b dnswire.Builder }

func startLocal(cq *clientQuery, rcode int) *localReply {
	set := dnswire.FlagQR | dnswire.FlagRA
	if cq.rd {
		set |= dnswire.FlagRD
	}
	if cq.cd {
		set |= dnswire.FlagCD
	}
	r := &localReply{b: dnswire.NewBuilder(make([]byte, 0, 128), dnswire.Header{Flags: dnswire.Flags(dnswire.OpcodeQuery, rcode, set)})}
	r.b.Question(cq.qname, cq.qtype, cq.qclass)
	return r
}

// owner is name in wire form: the client's own bytes when it is the name
// asked.
func owner(cq *clientQuery, name string) []byte {
	if name == cq.name {
		return cq.qname
	}
	wire, err := dnswire.PackName(nil, name)
	if err != nil {
		return cq.qname // not reached: local names are checked names
	}
	return wire
}

func (r *localReply) addr(cq *clientQuery, name string, a netip.Addr) {
	t, data := dnswire.TypeA, a.AsSlice()
	if a.Is6() {
		t = dnswire.TypeAAAA
	}
	r.b.RR(dnswire.SectionAnswer, owner(cq, name), t, dnswire.ClassINET, localTTL, data)
}

func (r *localReply) ptr(cq *clientQuery, name, target string) {
	wire, err := dnswire.PackName(nil, target)
	if err != nil {
		return
	}
	r.b.NameRR(dnswire.SectionAnswer, owner(cq, name), dnswire.TypePTR, dnswire.ClassINET, localTTL, wire)
}

// finish adds an OPT record when the client sent one, and returns the
// message.
func (r *localReply) finish(cq *clientQuery) []byte {
	if cq.opt {
		var ttl uint32
		if cq.do {
			ttl = dnswire.EDNSFlagDO
		}
		r.b.OPT(upstreamUDPSize, ttl, nil)
	}
	m, _ := r.b.Finish()
	return m
}
