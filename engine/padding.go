package engine

import (
	"encoding/binary"

	"github.com/dohfwd/dohfwd/engine/dnswire"
)

// The padding rules (RFC 7830, RFC 8467) and the error answer to a query,
// shared by the engine's replies and the front ends (DoH, DoT, plain DNS).

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

// WantsPadding reports whether the wire query query carries an EDNS(0)
// Padding option (RFC 7830): only then is its answer padded (RFC 8467 §4).
func WantsPadding(query []byte) bool {
	rr, ok := dnswire.FindOPT(query)
	return ok && dnswire.HasOption(rr.Rdata(query), dnswire.EDNS0PADDING)
}

// PadReply pads the message at dst[start:] to a multiple of PaddingBlock
// by adding a Padding option to its OPT record, which must be its last
// record (as the engine writes replies); a message without one is left
// alone.
func PadReply(dst []byte, start int) []byte { return padOPT(dst, start) }

// AppendErrorReply appends the DNS error answer to the wire query raw (at
// least its 12-byte header) to dst: the query's ID, opcode, RD and CD
// bits, RA, rcode; its question when it reads and has exactly one; an OPT
// record (UDP size 4096) when it has one or the rcode needs it (BADVERS).
// Without exactly one question, the reply has none; when its records do
// not read, the reply has no OPT record but for an extended rcode.
func AppendErrorReply(dst, raw []byte, rcode int) []byte {
	flags := binary.BigEndian.Uint16(raw[dnswire.OffFlags:])
	set := dnswire.FlagQR | dnswire.FlagRA | flags&(dnswire.FlagRD|dnswire.FlagCD)
	b := dnswire.NewBuilder(dst, dnswire.Header{ID: binary.BigEndian.Uint16(raw),
		Flags: dnswire.Flags(int(flags>>11)&0xF, rcode, set)})
	var name [dnswire.MaxNameLen]byte
	p, _ := dnswire.NewParser(raw)
	q, ok := p.Question()
	var qname []byte
	if ok && p.Header().Counts[0] == 1 {
		var err error
		if qname, _, err = dnswire.AppendNameWire(name[:0], raw, q.NameOff); err != nil {
			qname = nil
		}
	}
	opt := false
	for {
		rr, more := p.Next()
		if !more {
			break
		}
		opt = opt || rr.Type == dnswire.TypeOPT
	}
	if p.Err() != nil || qname == nil {
		opt = false
	}
	if qname != nil {
		b.Question(qname, q.Type, q.Class)
	}
	if opt || rcode > 0xF {
		b.OPT(dnswire.DefaultMsgSize, uint32(rcode>>4)<<24, nil)
	}
	out, err := b.Finish()
	if err != nil {
		return dst
	}
	return out
}
