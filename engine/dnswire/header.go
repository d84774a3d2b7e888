package dnswire

import "encoding/binary"

// Header field offsets and the fixed part of a record after its name.
const (
	OffID       = 0
	OffFlags    = 2
	OffQDCount  = 4
	OffANCount  = 6
	OffNSCount  = 8
	OffARCount  = 10
	RRFixedLen  = 10 // TYPE, CLASS, TTL, RDLENGTH
	OPTFixedLen = 11 // an OPT record's root name and fixed part
)

// Header flag bits, in the 16-bit word at OffFlags.
const (
	FlagQR uint16 = 1 << 15
	FlagAA uint16 = 1 << 10
	FlagTC uint16 = 1 << 9
	FlagRD uint16 = 1 << 8
	FlagRA uint16 = 1 << 7
	FlagAD uint16 = 1 << 5
	FlagCD uint16 = 1 << 4
)

// EDNSFlagDO is the DO bit in an OPT record's TTL field (RFC 3225).
const EDNSFlagDO uint32 = 1 << 15

// Header is a message's fixed 12 bytes.
type Header struct {
	ID    uint16
	Flags uint16 // QR, opcode, AA, TC, RD, RA, Z, AD, CD and rcode as on the wire
	// Counts are QDCOUNT, ANCOUNT, NSCOUNT and ARCOUNT.
	Counts [4]uint16
}

// ReadHeader reads m's header; false when m is shorter than one.
func ReadHeader(m []byte) (Header, bool) {
	if len(m) < HeaderLen {
		return Header{}, false
	}
	return Header{
		ID:    binary.BigEndian.Uint16(m),
		Flags: binary.BigEndian.Uint16(m[OffFlags:]),
		Counts: [4]uint16{binary.BigEndian.Uint16(m[OffQDCount:]), binary.BigEndian.Uint16(m[OffANCount:]),
			binary.BigEndian.Uint16(m[OffNSCount:]), binary.BigEndian.Uint16(m[OffARCount:])},
	}, true
}

// AppendHeader appends h.
func AppendHeader(dst []byte, h Header) []byte {
	dst = binary.BigEndian.AppendUint16(dst, h.ID)
	dst = binary.BigEndian.AppendUint16(dst, h.Flags)
	for _, c := range h.Counts {
		dst = binary.BigEndian.AppendUint16(dst, c)
	}
	return dst
}

// Opcode is the header's opcode.
func (h Header) Opcode() int { return int(h.Flags>>11) & 0xF }

// Rcode is the header's 4-bit rcode (the OPT record holds the rest).
func (h Header) Rcode() int { return int(h.Flags & 0xF) }

// Has reports whether every bit of flag is set.
func (h Header) Has(flag uint16) bool { return h.Flags&flag == flag }

// Flags builds a header's flag word from its opcode and rcode (the low 4
// bits) and the bits in set.
func Flags(opcode, rcode int, set uint16) uint16 {
	return uint16(opcode&0xF)<<11 | uint16(rcode&0xF) | set
}
