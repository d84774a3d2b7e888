package engine

import (
	"encoding/binary"
	"strings"
	"unsafe"

	"github.com/miekg/dns"
)

// Replies travel as bytes (SPEC §1.3; issue 12): the engine matches an
// upstream reply from its header and question, reads what it needs (rcode,
// TC, TTLs, where the OPT record is) by walking its records without
// unpacking them, stores it packed, and writes each client's reply by
// copying it with the client's ID, the client's question case, aged TTLs
// and an OPT record shaped for the client.

// Wire offsets and record fields.
const (
	offFlags   = 2
	offQDCount = 4
	offANCount = 6
	offNSCount = 8
	offARCount = 10
	rrFixedLen = 10 // type, class, TTL, RDLENGTH
	optRRLen   = 11 // root name and the fixed part of an OPT record
)

// walkedReply is what one walk of a message found.
type walkedReply struct {
	rcode    int // header rcode with the OPT's extended bits
	tc       bool
	ancount  int
	facts    ttlFacts
	optStart int // offset of the OPT record, -1 if none
	optEnd   int
	optLast  bool // the OPT record is the message's last record
	optData  []byte
	optTTL   uint32
	optClass uint16
	end      int // where the last record ends: bytes past it are not the message's
}

// skipName returns the offset just past the name at off, or -1 when it
// runs past the message or uses a reserved label type. A compression
// pointer ends a name; its target is only bounds-checked, since nothing
// here follows it.
func skipName(m []byte, off int) int {
	for {
		if off >= len(m) {
			return -1
		}
		l := int(m[off])
		switch l & 0xC0 {
		case 0x00:
			if l == 0 {
				return off + 1
			}
			off += 1 + l
		case 0xC0:
			if off+2 > len(m) || int(binary.BigEndian.Uint16(m[off:])&0x3FFF) >= off {
				return -1 // pointers point back, or the name is garbage
			}
			return off + 2
		default:
			return -1
		}
	}
}

// walkReply reads m's records without unpacking them. ttlAt, when not nil,
// receives the section (0 answer, 1 authority, 2 additional), the offset of
// the TTL field and the type of every record (OPT excluded). It
// reports false for a message whose header counts, names or record
// lengths run past its end (a truncated final record included).
func walkReply(m []byte, ttlAt func(section, off int, typ uint16)) (walkedReply, bool) {
	w := walkedReply{optStart: -1}
	if len(m) < headerLen {
		return w, false
	}
	w.rcode = int(m[3] & 0x0F)
	w.tc = m[offFlags]&0x02 != 0
	off := headerLen
	for range binary.BigEndian.Uint16(m[offQDCount:]) {
		if off = skipName(m, off); off < 0 || off+4 > len(m) {
			return w, false
		}
		off += 4
	}
	w.ancount = int(binary.BigEndian.Uint16(m[offANCount:]))
	counts := [3]int{w.ancount, int(binary.BigEndian.Uint16(m[offNSCount:])), int(binary.BigEndian.Uint16(m[offARCount:]))}
	w.facts.answers = w.ancount
	w.facts.minPositive = ^uint32(0)
	for section, n := range counts {
		for range n {
			start := off
			if off = skipName(m, off); off < 0 || off+rrFixedLen > len(m) {
				return w, false
			}
			typ := binary.BigEndian.Uint16(m[off:])
			ttl := binary.BigEndian.Uint32(m[off+4:])
			rdlen := int(binary.BigEndian.Uint16(m[off+8:]))
			rdata := off + rrFixedLen
			end := rdata + rdlen
			if end > len(m) {
				return w, false
			}
			if typ == dns.TypeOPT {
				if section != 2 || w.optStart >= 0 || m[start] != 0 {
					return w, false // RFC 6891: one OPT, in additional, owner root
				}
				w.optStart, w.optEnd = start, end
				w.optClass = binary.BigEndian.Uint16(m[off+2:])
				w.optTTL = ttl
				w.optData = m[rdata:end]
				w.rcode |= int(ttl>>24) << 4
				off = end
				continue
			}
			if ttlAt != nil {
				ttlAt(section, off+4, typ)
			}
			if section < 2 {
				w.facts.minPositive = min(w.facts.minPositive, ttl)
			}
			if section == 1 && typ == dns.TypeSOA && !w.facts.hasSOA && rdlen >= 20 {
				w.facts.hasSOA = true
				w.facts.soaTTL = ttl
				w.facts.soaMinimum = binary.BigEndian.Uint32(m[end-4:])
			}
			off = end
		}
	}
	w.optLast = w.optStart >= 0 && w.optEnd == off
	w.end = off
	w.facts.rcode = w.rcode
	return w, true
}

// ttlFacts are what the TTL of an answer is computed from.
type ttlFacts struct {
	rcode       int
	answers     int    // records in the answer section
	minPositive uint32 // the smallest TTL in the answer and authority sections
	hasSOA      bool   // the authority section carries a SOA
	soaTTL      uint32 // the first SOA's TTL
	soaMinimum  uint32 // and its MINIMUM field
}

// answerTTL is the TTL of an answer: how long the cache keeps it (before
// the configured clamps), how long an HTTP cache may keep it (RFC 8484
// §5.1), how long a search candidate's CNAME lives. One rule for all:
//
//   - NOERROR with answer records: the smallest TTL in the answer and
//     authority sections. The authority section counts: a cache that keeps
//     the message serves its NS records too, and must not serve them past
//     their TTL. Additional records (glue) do not bound it; the cache
//     counts their TTLs down to 0 at least. OPT is not a record.
//   - NXDOMAIN, and NOERROR without answer records (NODATA): RFC 2308 §5,
//     the smaller of the authority SOA's TTL and its MINIMUM; without a SOA
//     the answer is not to be cached.
//   - any other rcode is about this moment, not the name: not cached.
func answerTTL(f ttlFacts) (seconds uint32, cacheable bool) {
	switch {
	case f.rcode == dns.RcodeSuccess && f.answers > 0:
		return f.minPositive, true
	case f.rcode == dns.RcodeSuccess || f.rcode == dns.RcodeNameError:
		if f.hasSOA {
			return min(f.soaTTL, f.soaMinimum), true
		}
	}
	return 0, false
}

// WireTTL is the TTL of the answer in the wire message m (answerTTL's
// rule), and whether it may be cached at all. A message that does not
// walk may not.
func WireTTL(m []byte) (seconds uint32, cacheable bool) {
	w, ok := walkReply(m, nil)
	if !ok {
		return 0, false
	}
	return answerTTL(w.facts)
}

// MsgTTL is WireTTL for an unpacked message: the same rule.
func MsgTTL(m *dns.Msg) (seconds uint32, cacheable bool) {
	f := ttlFacts{rcode: m.Rcode, answers: len(m.Answer), minPositive: ^uint32(0)}
	for _, section := range [2][]dns.RR{m.Answer, m.Ns} {
		for _, rr := range section {
			if h := rr.Header(); h.Rrtype != dns.TypeOPT {
				f.minPositive = min(f.minPositive, h.Ttl)
			}
		}
	}
	for _, rr := range m.Ns {
		if soa, ok := rr.(*dns.SOA); ok {
			f.hasSOA, f.soaTTL, f.soaMinimum = true, soa.Hdr.Ttl, soa.Minttl
			break
		}
	}
	return answerTTL(f)
}

// clientQuery is a client's query as the engine reads it: header,
// question and OPT, without unpacking. msg is the unpacked query, made
// only on the rare paths that want it (local answers, forwarded ECS).
type clientQuery struct {
	raw    []byte
	id     uint16
	rd, cd bool
	name   string // as the client wrote it
	qname  []byte // the question name in wire form (raw's bytes)
	qtype  uint16
	qclass uint16
	opt    bool // the query carries an OPT record
	do     bool
	padded bool // an EDNS Padding option (RFC 7830)
	ecs    bool // an EDNS Client Subnet option
	msg    *dns.Msg
	// borrowed says name lies in a pooled buffer that goes back when the
	// call that parsed it returns (ResolveWireImmediate): whatever keeps
	// the name calls own first.
	borrowed bool
}

// own makes cq's name a string of its own, if it was borrowed.
func (cq *clientQuery) own() {
	if cq.borrowed {
		cq.name, cq.borrowed = strings.Clone(cq.name), false
	}
}

// parseQuery reads a query the front end has checked (QR clear, opcode
// QUERY, exactly one question). It reports false for one it cannot read
// this way (a compressed question name, records past the end).
func parseQuery(raw []byte) (*clientQuery, bool) {
	cq := new(clientQuery)
	if !cq.parse(raw) {
		return nil, false
	}
	return cq, true
}

// parse is parseQuery into cq, which the caller may keep on its stack.
func (cq *clientQuery) parse(raw []byte) bool { return cq.parseInto(raw, nil) }

// parseInto is parse that writes a name without escapes into buf, when
// buf is not nil, and borrows it from there instead of allocating.
func (cq *clientQuery) parseInto(raw []byte, buf *[maxNameText]byte) bool {
	if len(raw) < headerLen || binary.BigEndian.Uint16(raw[offQDCount:]) != 1 {
		return false
	}
	qe := questionEnd(raw)
	if qe < 0 {
		return false
	}
	*cq = clientQuery{
		raw:    raw,
		id:     binary.BigEndian.Uint16(raw),
		rd:     raw[offFlags]&0x01 != 0,
		cd:     raw[offFlags+1]&0x10 != 0,
		qname:  raw[headerLen : qe-4],
		qtype:  binary.BigEndian.Uint16(raw[qe-4:]),
		qclass: binary.BigEndian.Uint16(raw[qe-2:]),
	}
	if buf != nil {
		if n, simple := appendName(buf[:0], cq.qname); simple {
			cq.name, cq.borrowed = unsafe.String(&buf[0], len(n)), true
		}
	}
	if !cq.borrowed {
		name, ok := nameString(cq.qname)
		if !ok {
			return false
		}
		cq.name = name
	}
	off := qe
	counts := int(binary.BigEndian.Uint16(raw[offANCount:])) + int(binary.BigEndian.Uint16(raw[offNSCount:])) +
		int(binary.BigEndian.Uint16(raw[offARCount:]))
	for range counts {
		start := off
		if off = skipName(raw, off); off < 0 || off+rrFixedLen > len(raw) {
			return false
		}
		typ := binary.BigEndian.Uint16(raw[off:])
		ttl := binary.BigEndian.Uint32(raw[off+4:])
		end := off + rrFixedLen + int(binary.BigEndian.Uint16(raw[off+8:]))
		if end > len(raw) {
			return false
		}
		if typ == dns.TypeOPT && raw[start] == 0 && !cq.opt {
			cq.opt, cq.do = true, ttl&(1<<15) != 0
			for o := off + rrFixedLen; o+4 <= end; {
				code := binary.BigEndian.Uint16(raw[o:])
				l := int(binary.BigEndian.Uint16(raw[o+2:]))
				switch code {
				case dns.EDNS0PADDING:
					cq.padded = true
				case dns.EDNS0SUBNET:
					cq.ecs = true
				}
				o += 4 + l
			}
		}
		off = end
	}
	return true
}

// maxNameText bounds the presentation form of a wire name without escapes:
// 255 bytes of wire name and a final dot.
const maxNameText = 256

// nameString is the presentation form of an uncompressed wire name, as
// miekg/dns writes it (so events and routes see the same text).
func nameString(wire []byte) (string, bool) {
	var buf [maxNameText]byte
	out, simple := appendName(buf[:0], wire)
	if !simple {
		// Escapes: let miekg/dns write them.
		name, _, err := dns.UnpackDomainName(wire, 0)
		return name, err == nil
	}
	return string(out), true
}

// appendName appends the presentation form of an uncompressed wire name
// to dst ("." for the root), and reports false, having appended only
// part of it, when a label needs escapes.
func appendName(dst, wire []byte) ([]byte, bool) {
	start := len(dst)
	for off := 0; off < len(wire); {
		l := int(wire[off])
		if l == 0 {
			break
		}
		for _, c := range wire[off+1 : off+1+l] {
			if escaped[c] {
				return dst, false
			}
		}
		dst = append(append(dst, wire[off+1:off+1+l]...), '.')
		off += 1 + l
	}
	if len(dst) == start {
		dst = append(dst, '.')
	}
	return dst, true
}

// escaped marks the bytes a name's presentation form escapes (and $,
// left to miekg/dns as before): controls, space, non-ASCII and
// . \ " ' ( ) ; @. A table: appendName looks at every byte of every
// question's name.
var escaped = func() (t [256]bool) {
	for c := range t {
		t[c] = c <= ' ' || c >= 0x7f || strings.IndexByte(`.\"'();@$`, byte(c)) >= 0
	}
	return t
}()

// message returns the client's query unpacked, unpacking it the first time.
func (cq *clientQuery) message() *dns.Msg {
	if cq.msg == nil {
		m := new(dns.Msg)
		if err := m.Unpack(cq.raw); err != nil {
			// parseQuery read it: only records it skipped can fail.
			m = new(dns.Msg)
			m.Id, m.RecursionDesired, m.CheckingDisabled = cq.id, cq.rd, cq.cd
			m.Question = []dns.Question{{Name: cq.name, Qtype: cq.qtype, Qclass: cq.qclass}}
			if cq.opt {
				m.SetEdns0(upstreamUDPSize, cq.do)
			}
		}
		cq.msg = m
	}
	return cq.msg
}

// appendPacked appends m packed for cq: compressed, the client's ID, and
// padded when the query was.
func appendPacked(dst []byte, m *dns.Msg, cq *clientQuery) ([]byte, error) {
	c := *m
	c.Id, c.Compress = cq.id, true
	start := len(dst)
	spare := dst[len(dst):cap(dst)]
	out, err := c.PackBuffer(spare)
	if err != nil {
		return dst, err
	}
	if len(out) > 0 && len(spare) >= len(out) && &spare[0] == &out[0] {
		dst = dst[:start+len(out)] // packed in place
	} else {
		dst = append(dst, out...)
	}
	if cq.padded {
		dst = padOPT(dst, start)
	}
	return dst, nil
}

// padOPT pads the message at dst[start:] to a multiple of PaddingBlock
// by adding a Padding option to its OPT record, which must be the last
// record (as the engine writes replies). Without one it is left alone.
func padOPT(dst []byte, start int) []byte {
	w, ok := walkReply(dst[start:], nil)
	if !ok || !w.optLast {
		return dst
	}
	n := PaddingLen(len(dst) - start + 4)
	rdlen := start + w.optStart + optRRLen - 2
	binary.BigEndian.PutUint16(dst[rdlen:], binary.BigEndian.Uint16(dst[rdlen:])+uint16(4+n))
	dst = binary.BigEndian.AppendUint16(dst, dns.EDNS0PADDING)
	dst = binary.BigEndian.AppendUint16(dst, uint16(n))
	return append(dst, zeros[:n]...)
}

// replyRcode is the rcode of a wire reply, extended bits included.
func replyRcode(m []byte) int {
	w, ok := walkReply(m, nil)
	if !ok {
		if len(m) >= headerLen {
			return int(m[3] & 0x0F)
		}
		return -1
	}
	return w.rcode
}
