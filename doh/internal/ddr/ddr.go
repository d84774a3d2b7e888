// Package ddr answers Discovery of Designated Resolvers (RFC 9462): a
// query for _dns.resolver.arpa SVCB gets the encrypted resolvers this
// server runs — DoH with alpn=h2 and its dohpath, DoT with alpn=dot, DoQ
// with alpn=doq (RFC 9461) — so
// that an operating system that found it as a plain DNS server upgrades by
// itself. Building the records and answering are pure functions; Resolver
// puts the answer in front of another resolver.
package ddr

import (
	"encoding/binary"
	"net/netip"
	"strings"

	"github.com/dohfwd/dohfwd/engine/dnswire"
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
	DoQ                 // DNS over QUIC, RFC 9250 (alpn=doq)
)

// Endpoint is one encrypted listener as clients reach it.
type Endpoint struct {
	Protocol Protocol
	Port     uint16
	// Path is the DoH path, e.g. "/dns-query"; the dohpath parameter is
	// its URI template, Path + "{?dns}".
	Path string
	// HTTP3: the DoH listener also serves HTTP/3 on the same port (UDP):
	// alpn lists h3 after h2 (RFC 9461 §3.1).
	HTTP3 bool
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

// record is one record of the designation in wire form.
type record struct {
	owner  []byte // uncompressed
	rrtype uint16
	rdata  []byte
}

// records are the SVCB records of d, in priority order (for each name its
// endpoints as listed, priorities counting up from 1), and the names' A
// and AAAA records. A name that is not a domain name is left out.
func records(d Designation) (answer, additional []record) {
	var v4, v6 []byte // the hints' values
	for _, a := range d.Addresses {
		if a = a.Unmap(); a.Is4() {
			v4 = append(v4, a.AsSlice()...)
		} else {
			v6 = append(v6, a.AsSlice()...)
		}
	}
	owner, _ := dnswire.PackName(nil, Name)
	prio := uint16(0)
	for _, name := range d.Names {
		target, err := dnswire.PackName(nil, dnswire.Fqdn(strings.ToLower(name)))
		if err != nil {
			continue
		}
		for _, e := range d.Endpoints {
			prio++
			// SvcParams in rising key order (RFC 9460 §2.2).
			rdata := binary.BigEndian.AppendUint16(nil, prio)
			rdata = append(rdata, target...)
			alpn := e.Protocol.alpn()
			value := append([]byte{byte(len(alpn))}, alpn...)
			if e.HTTP3 && e.Protocol == DoH {
				value = append(value, 2, 'h', '3')
			}
			rdata = appendParam(rdata, dnswire.SvcParamALPN, value)
			rdata = appendParam(rdata, dnswire.SvcParamPort, binary.BigEndian.AppendUint16(nil, e.Port))
			if len(v4) > 0 {
				rdata = appendParam(rdata, dnswire.SvcParamIPv4Hint, v4)
			}
			if len(v6) > 0 {
				rdata = appendParam(rdata, dnswire.SvcParamIPv6Hint, v6)
			}
			if e.Protocol == DoH {
				rdata = appendParam(rdata, dnswire.SvcParamDoHPath, []byte(e.Path+"{?dns}"))
			}
			answer = append(answer, record{owner, dnswire.TypeSVCB, rdata})
		}
		for _, a := range d.Addresses {
			if a = a.Unmap(); a.Is4() {
				additional = append(additional, record{target, dnswire.TypeA, a.AsSlice()})
			} else {
				additional = append(additional, record{target, dnswire.TypeAAAA, a.AsSlice()})
			}
		}
	}
	return answer, additional
}

// alpn is the protocol's ALPN identifier, as its SVCB record names it.
func (p Protocol) alpn() string {
	switch p {
	case DoT:
		return "dot"
	case DoQ:
		return "doq"
	}
	return "h2"
}

// appendParam appends an SvcParam: key, length, value.
func appendParam(dst []byte, key uint16, value []byte) []byte {
	dst = binary.BigEndian.AppendUint16(dst, key)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(value)))
	return append(dst, value...)
}

// Table is the designation as records, built once.
type Table struct {
	answer, additional []record
}

// NewTable builds d's records.
func NewTable(d Designation) *Table {
	t := new(Table)
	t.answer, t.additional = records(d)
	return t
}

// The zone and the designation's owner in wire form.
var (
	zoneWire = []byte("\x08resolver\x04arpa\x00")
	nameWire = []byte("\x04_dns\x08resolver\x04arpa\x00")
)

// AppendAnswer appends the local answer to the wire query query to dst
// when its one question is in resolver.arpa, and reports false (dst as it
// was) otherwise: _dns.resolver.arpa SVCB gets the table's records; other
// types there, and resolver.arpa itself, NODATA; other names NXDOMAIN (RFC
// 9462, section 6.4: these names are never forwarded). A nil table
// answers NODATA: no designation. The reply is authoritative, keeps the
// query's ID, opcode, RD and CD, and has an OPT record (with the query's
// DO) when the query has one.
func (t *Table) AppendAnswer(dst, query []byte) ([]byte, bool) {
	p, ok := dnswire.NewParser(query)
	if !ok || p.Header().Counts[0] != 1 {
		return dst, false
	}
	q, ok := p.Question()
	if !ok {
		return dst, false
	}
	var buf [dnswire.MaxNameLen]byte
	name, _, err := dnswire.AppendNameWire(buf[:0], query, q.NameOff)
	if err != nil || !inZoneWire(name) {
		return dst, false
	}
	opt, do := false, false
	for {
		rr, more := p.Next()
		if !more {
			break
		}
		if rr.Type == dnswire.TypeOPT && rr.Section == dnswire.SectionAdditional {
			opt, do = true, dnswire.ReadOPT(query, rr).DO()
		}
	}
	h := p.Header()
	rcode := dnswire.RcodeSuccess
	var answer, additional []record
	switch {
	case dnswire.EqualNames(name, nameWire) && q.Type == dnswire.TypeSVCB && q.Class == dnswire.ClassINET && t != nil:
		answer, additional = t.answer, t.additional
	case dnswire.EqualNames(name, nameWire) || dnswire.EqualNames(name, zoneWire):
	default:
		rcode = dnswire.RcodeNameError
	}
	b := dnswire.NewBuilder(dst, dnswire.Header{ID: h.ID, Flags: dnswire.Flags(h.Opcode(), rcode,
		dnswire.FlagQR|dnswire.FlagAA|dnswire.FlagRA|h.Flags&(dnswire.FlagRD|dnswire.FlagCD))})
	b.Question(name, q.Type, q.Class)
	for _, rr := range answer {
		b.RR(dnswire.SectionAnswer, rr.owner, rr.rrtype, dnswire.ClassINET, TTL, rr.rdata)
	}
	for _, rr := range additional {
		b.RR(dnswire.SectionAdditional, rr.owner, rr.rrtype, dnswire.ClassINET, TTL, rr.rdata)
	}
	if opt {
		var ttl uint32
		if do {
			ttl = dnswire.EDNSFlagDO
		}
		b.OPT(dnswire.DefaultMsgSize, ttl, nil)
	}
	out, err := b.Finish()
	if err != nil {
		return dst, false
	}
	return out, true
}

// inZoneWire reports whether the uncompressed wire name is resolver.arpa
// or under it.
func inZoneWire(name []byte) bool {
	for off := 0; off < len(name) && name[off] != 0; off += 1 + int(name[off]) {
		if len(name)-off == len(zoneWire) {
			return dnswire.EqualNames(name[off:], zoneWire)
		}
	}
	return false
}
