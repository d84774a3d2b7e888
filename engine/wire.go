package engine

import (
	"encoding/binary"
	"strings"
	"unsafe"

	"github.com/dohfwd/dohfwd/engine/dnswire"
)

// Replies travel as bytes: the engine matches an
// upstream reply from its header and question, reads what it needs (rcode,
// TC, TTLs, where the OPT record is) by walking its records without
// unpacking them, stores it packed, and writes each client's reply by
// copying it with the client's ID, the client's question case, aged TTLs
// and an OPT record shaped for the client.

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

// walkReply reads m's records without unpacking them. ttlAt, when not nil,
// receives the section (0 answer, 1 authority, 2 additional), the offset of
// the TTL field and the type of every record (OPT excluded); the facts
// read the TTL it may have rewritten there. It
// reports false for a message whose header counts, names or record
// lengths run past its end (a truncated final record included).
func walkReply(m []byte, ttlAt func(section, off int, typ uint16)) (w walkedReply, ok bool) {
	ok = walkReplyInto(m, ttlAt, &w)
	return w, ok
}

// walkReplyInto is walkReply into *w, which it sets whole: the forwarding
// path walks each reply into its exchangeResult in place (a copy of a
// walkedReply costs a call to the host's memmove as WebAssembly).
func walkReplyInto(m []byte, ttlAt func(section, off int, typ uint16), w *walkedReply) bool {
	*w = walkedReply{optStart: -1}
	if len(m) < dnswire.HeaderLen {
		return false
	}
	w.rcode = int(m[3] & 0x0F)
	w.tc = m[dnswire.OffFlags]&0x02 != 0
	off := dnswire.HeaderLen
	for range binary.BigEndian.Uint16(m[dnswire.OffQDCount:]) {
		if off = dnswire.SkipName(m, off); off < 0 || off+4 > len(m) {
			return false
		}
		off += 4
	}
	w.ancount = int(binary.BigEndian.Uint16(m[dnswire.OffANCount:]))
	counts := [3]int{w.ancount, int(binary.BigEndian.Uint16(m[dnswire.OffNSCount:])), int(binary.BigEndian.Uint16(m[dnswire.OffARCount:]))}
	w.facts.answers = w.ancount
	w.facts.minPositive = ^uint32(0)
	for section, n := range counts {
		for range n {
			start := off
			if off = dnswire.SkipName(m, off); off < 0 || off+dnswire.RRFixedLen > len(m) {
				return false
			}
			typ := binary.BigEndian.Uint16(m[off:])
			ttl := binary.BigEndian.Uint32(m[off+4:])
			rdlen := int(binary.BigEndian.Uint16(m[off+8:]))
			rdata := off + dnswire.RRFixedLen
			end := rdata + rdlen
			if end > len(m) {
				return false
			}
			if typ == dnswire.TypeOPT {
				if section != 2 || w.optStart >= 0 || m[start] != 0 {
					return false // RFC 6891: one OPT, in additional, owner root
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
				ttl = binary.BigEndian.Uint32(m[off+4:]) // as ttlAt left it
			}
			if section < 2 {
				w.facts.minPositive = min(w.facts.minPositive, ttl)
			}
			if section == 1 && typ == dnswire.TypeSOA && !w.facts.hasSOA && rdlen >= 20 {
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
	return true
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
	case f.rcode == dnswire.RcodeSuccess && f.answers > 0:
		return f.minPositive, true
	case f.rcode == dnswire.RcodeSuccess || f.rcode == dnswire.RcodeNameError:
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

// clientQuery is a client's query as the engine reads it: header,
// question and OPT, without unpacking.
type clientQuery struct {
	raw    []byte
	id     uint16
	rd, cd bool
	name   string // as the client wrote it
	qname  []byte // the question name in wire form (raw's bytes)
	qtype  uint16
	qclass uint16
	udp    uint16 // the OPT record's UDP payload size
	opt    bool   // the query carries an OPT record
	do     bool
	padded bool // an EDNS Padding option (RFC 7830)
	ecs    bool // an EDNS Client Subnet option
	// lower says name has no upper-case letter (read while it was
	// written): its cache key is name itself, without strings.ToLower's
	// pass over it. False when not known.
	lower bool
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
	if len(raw) < dnswire.HeaderLen || binary.BigEndian.Uint16(raw[dnswire.OffQDCount:]) != 1 {
		return false
	}
	qe := questionEnd(raw)
	if qe < 0 {
		return false
	}
	// Every field is set one by one (a field added to clientQuery must be
	// set here too; TestParseIntoSetsEveryField): as WebAssembly a
	// literal's zeroing and copy are calls to the host's memmove.
	cq.raw, cq.id = raw, binary.BigEndian.Uint16(raw)
	cq.rd, cq.cd = raw[dnswire.OffFlags]&0x01 != 0, raw[dnswire.OffFlags+1]&0x10 != 0
	cq.name, cq.qname = "", raw[dnswire.HeaderLen:qe-4]
	cq.qtype, cq.qclass = binary.BigEndian.Uint16(raw[qe-4:]), binary.BigEndian.Uint16(raw[qe-2:])
	cq.udp, cq.opt, cq.do, cq.padded, cq.ecs = 0, false, false, false, false
	cq.lower, cq.borrowed = false, false
	if buf != nil {
		if n, simple, upper := dnswire.AppendPlainNameTextUpper(buf[:0], cq.qname); simple {
			cq.name, cq.borrowed, cq.lower = unsafe.String(&buf[0], len(n)), true, !upper
		}
	}
	if !cq.borrowed {
		name, lower := nameString(cq.qname)
		cq.name, cq.lower = name, lower
	}
	off := qe
	counts := int(binary.BigEndian.Uint16(raw[dnswire.OffANCount:])) + int(binary.BigEndian.Uint16(raw[dnswire.OffNSCount:])) +
		int(binary.BigEndian.Uint16(raw[dnswire.OffARCount:]))
	for range counts {
		start := off
		if off = dnswire.SkipName(raw, off); off < 0 || off+dnswire.RRFixedLen > len(raw) {
			return false
		}
		typ := binary.BigEndian.Uint16(raw[off:])
		ttl := binary.BigEndian.Uint32(raw[off+4:])
		end := off + dnswire.RRFixedLen + int(binary.BigEndian.Uint16(raw[off+8:]))
		if end > len(raw) {
			return false
		}
		if typ == dnswire.TypeOPT && raw[start] == 0 && !cq.opt {
			cq.opt, cq.do = true, ttl&(1<<15) != 0
			cq.udp = binary.BigEndian.Uint16(raw[off+2:])
			for o := off + dnswire.RRFixedLen; o+4 <= end; {
				code := binary.BigEndian.Uint16(raw[o:])
				l := int(binary.BigEndian.Uint16(raw[o+2:]))
				switch code {
				case dnswire.EDNS0PADDING:
					cq.padded = true
				case dnswire.EDNS0SUBNET:
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
// miekg/dns writes it (so events and routes see the same text), and
// whether it is known to have no upper-case letter.
func nameString(wire []byte) (name string, lower bool) {
	var buf [maxNameText]byte
	out, simple, upper := dnswire.AppendPlainNameTextUpper(buf[:0], wire)
	if !simple {
		return dnswire.NameText(wire), false
	}
	return string(out), !upper
}

// appendMade appends reply, a message the engine made for cq (OPT, if
// any, last), with the client's ID, padded when the query was.
func appendMade(dst, reply []byte, cq *clientQuery) []byte {
	start := len(dst)
	dst = append(dst, reply...)
	binary.BigEndian.PutUint16(dst[start:], cq.id)
	if cq.padded {
		dst = padOPT(dst, start)
	}
	return dst
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
	rdlen := start + w.optStart + dnswire.OPTFixedLen - 2
	binary.BigEndian.PutUint16(dst[rdlen:], binary.BigEndian.Uint16(dst[rdlen:])+uint16(4+n))
	dst = binary.BigEndian.AppendUint16(dst, dnswire.EDNS0PADDING)
	dst = binary.BigEndian.AppendUint16(dst, uint16(n))
	return append(dst, zeros[:n]...)
}

// replyRcode is the rcode of a wire reply, extended bits included.
func replyRcode(m []byte) int {
	w, ok := walkReply(m, nil)
	if !ok {
		if len(m) >= dnswire.HeaderLen {
			return int(m[3] & 0x0F)
		}
		return -1
	}
	return w.rcode
}
