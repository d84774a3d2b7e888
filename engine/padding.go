package engine

import (
	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/dnswire"
)

// The padding rules (RFC 7830, RFC 8467) and the error answer to a query,
// shared by the engine's wire replies and the front ends (DoH, DoT, plain
// DNS) that pack a dns.Msg themselves.

// PaddingBlock is the block length padded replies are a multiple of (RFC
// 8467 §4.1, the recommended block length for responses).
const PaddingBlock = 468

// zeros is the padding: RFC 7830 asks for zero octets.
var zeros [PaddingBlock]byte

// PaddingLen is how many padding bytes take a message of size bytes (its
// Padding option already counted, empty) to the next multiple of
// PaddingBlock; 0 when that would pass the largest DNS message.
func PaddingLen(size int) int {
	n := (PaddingBlock - size%PaddingBlock) % PaddingBlock
	if size+n > dnswire.MaxMsgSize {
		return 0
	}
	return n
}

// PaddingBytes is n zero octets (n ≤ PaddingBlock), shared: never write
// to them.
func PaddingBytes(n int) []byte { return zeros[:n] }

// WantsPadding reports whether a query carries an EDNS(0) Padding option
// (RFC 7830): only then is its answer padded (RFC 8467 §4).
func WantsPadding(q *dns.Msg) bool {
	if o := q.IsEdns0(); o != nil {
		for _, e := range o.Option {
			if e.Option() == dnswire.EDNS0PADDING {
				return true
			}
		}
	}
	return false
}

// AddPadding gives m, a shallow copy the caller owns (its Extra is
// replaced, not changed), an OPT record of its own that keeps the reply's
// OPT header (size, DO, extended rcode) and its options but any padding,
// plus an empty Padding option, which it returns for the caller to size
// once the packed length is known.
func AddPadding(m *dns.Msg) *dns.EDNS0_PADDING {
	pad := &dns.EDNS0_PADDING{}
	opt := &dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dnswire.TypeOPT}}
	opt.SetUDPSize(dnswire.DefaultMsgSize)
	extra := make([]dns.RR, 0, len(m.Extra)+1)
	for _, rr := range m.Extra {
		if old, ok := rr.(*dns.OPT); ok {
			opt.Hdr.Class, opt.Hdr.Ttl = old.Hdr.Class, old.Hdr.Ttl
			for _, e := range old.Option {
				if e.Option() != dnswire.EDNS0PADDING {
					opt.Option = append(opt.Option, e)
				}
			}
			continue
		}
		extra = append(extra, rr)
	}
	opt.Option = append(opt.Option, pad)
	m.Extra = append(extra, opt)
	return pad
}

// ErrorReply is the DNS error answer to the query raw (at least its
// 12-byte header), unpacked as q when it could be: the query's ID, opcode,
// RD and CD bits, its question when it has exactly one, and an OPT record
// when the query had one or the rcode needs it (BADVERS).
func ErrorReply(q *dns.Msg, raw []byte, rcode int) *dns.Msg {
	m := new(dns.Msg)
	m.Id = uint16(raw[0])<<8 | uint16(raw[1])
	m.Response = true
	m.Opcode = int(raw[2]>>3) & 0xF
	m.RecursionDesired = raw[2]&0x01 != 0
	m.RecursionAvailable = true
	m.CheckingDisabled = raw[3]&0x10 != 0
	m.Rcode = rcode
	if q != nil && len(q.Question) == 1 {
		m.Question = q.Question
	}
	if q != nil && q.IsEdns0() != nil || rcode > 0xF {
		m.SetEdns0(dnswire.DefaultMsgSize, false)
	}
	return m
}
