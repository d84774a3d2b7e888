package dnswire

import "encoding/binary"

// Section is one of a message's record sections.
type Section uint8

const (
	SectionAnswer Section = iota
	SectionAuthority
	SectionAdditional
)

// Question is a question as it sits in a message.
type Question struct {
	NameOff int // where the name starts; it may end in a compression pointer
	Type    uint16
	Class   uint16
}

// RR is a resource record as it sits in a message: read in place, nothing
// copied.
type RR struct {
	Section Section
	Off     int // where the record starts: its owner name
	Type    uint16
	Class   uint16
	TTL     uint32
	Data    int // where its RDATA starts
	End     int // and ends: the record's end
}

// TTLOff is the offset of the record's TTL field.
func (rr RR) TTLOff() int { return rr.Data - 6 }

// Rdata is the record's RDATA in m.
func (rr RR) Rdata(m []byte) []byte { return m[rr.Data:rr.End] }

// Parser reads a message's header, questions and records in order,
// without unpacking them. Compression pointers are not followed, only
// checked to land in the message (AppendNameWire follows them). Its zero
// value reads nothing.
type Parser struct {
	msg     []byte
	h       Header
	off     int
	qleft   int
	section Section
	left    int // records left in section
	err     error
}

// NewParser starts reading m; false when m has no header.
func NewParser(m []byte) (Parser, bool) {
	h, ok := ReadHeader(m)
	if !ok {
		return Parser{}, false
	}
	return Parser{msg: m, h: h, off: HeaderLen, qleft: int(h.Counts[0]), left: int(h.Counts[1])}, true
}

// Header is the message's header.
func (p *Parser) Header() Header { return p.h }

// Msg is the message read.
func (p *Parser) Msg() []byte { return p.msg }

// Offset is where the parser reads next.
func (p *Parser) Offset() int { return p.off }

// Err is the reason Question or Next stopped early, nil at the end of the
// message.
func (p *Parser) Err() error { return p.err }

// Question reads the next question; false when none is left (or the
// message is cut short: see Err).
func (p *Parser) Question() (Question, bool) {
	if p.qleft == 0 || p.err != nil {
		return Question{}, false
	}
	start := p.off
	end := skipAnyName(p.msg, start)
	if end < 0 || end+4 > len(p.msg) {
		p.err = ErrShort
		return Question{}, false
	}
	p.qleft--
	p.off = end + 4
	return Question{NameOff: start, Type: binary.BigEndian.Uint16(p.msg[end:]), Class: binary.BigEndian.Uint16(p.msg[end+2:])}, true
}

// Next reads the next record, questions not yet read skipped; false at the
// end of the message or when it is cut short (see Err). Bytes past the
// last record are not read.
func (p *Parser) Next() (RR, bool) {
	for p.qleft > 0 {
		if _, ok := p.Question(); !ok {
			return RR{}, false
		}
	}
	for p.left == 0 {
		if p.section == SectionAdditional || p.err != nil {
			return RR{}, false
		}
		p.section++
		p.left = int(p.h.Counts[1+p.section])
	}
	if p.err != nil {
		return RR{}, false
	}
	start := p.off
	off := skipAnyName(p.msg, start)
	if off < 0 || off+RRFixedLen > len(p.msg) {
		p.err = ErrShort
		return RR{}, false
	}
	rr := RR{
		Section: p.section,
		Off:     start,
		Type:    binary.BigEndian.Uint16(p.msg[off:]),
		Class:   binary.BigEndian.Uint16(p.msg[off+2:]),
		TTL:     binary.BigEndian.Uint32(p.msg[off+4:]),
		Data:    off + RRFixedLen,
	}
	rr.End = rr.Data + int(binary.BigEndian.Uint16(p.msg[off+8:]))
	if rr.End > len(p.msg) {
		p.err = ErrShort
		return RR{}, false
	}
	p.left--
	p.off = rr.End
	return rr, true
}

// QuestionName is the question name at q.NameOff in m, in uncompressed
// wire form: m's own bytes when it is not compressed, else a copy.
func QuestionName(m []byte, q Question) ([]byte, error) {
	end := skipAnyName(m, q.NameOff)
	if end < 0 {
		return nil, ErrShort
	}
	if !compressed(m, q.NameOff, end) {
		return m[q.NameOff:end], nil
	}
	name, _, err := AppendNameWire(nil, m, q.NameOff)
	return name, err
}

// compressed reports whether the name m[off:end] ends in a pointer.
func compressed(m []byte, off, end int) bool {
	for off < end {
		l := int(m[off])
		if l&0xC0 == 0xC0 {
			return true
		}
		if l == 0 {
			return false
		}
		off += 1 + l
	}
	return false
}

// OPT is an OPT record's fields (RFC 6891 §6.1.2).
type OPT struct {
	UDPSize  uint16
	ExtRcode uint8 // the rcode's upper 8 bits
	Version  uint8
	Flags    uint16 // DO and the rest of the TTL's low half
	Options  []byte // the RDATA: options, each code, length, value
}

// DO reports the DNSSEC OK bit.
func (o OPT) DO() bool { return o.Flags&uint16(EDNSFlagDO) != 0 }

// ReadOPT reads the OPT record rr of m.
func ReadOPT(m []byte, rr RR) OPT {
	return OPT{UDPSize: rr.Class, ExtRcode: uint8(rr.TTL >> 24), Version: uint8(rr.TTL >> 16),
		Flags: uint16(rr.TTL), Options: rr.Rdata(m)}
}

// FindOPT finds m's OPT record: the first one, in the additional section
// with the root as owner. ok is false when m has none or does not read.
func FindOPT(m []byte) (rr RR, ok bool) {
	p, ok := NewParser(m)
	if !ok {
		return RR{}, false
	}
	for {
		r, more := p.Next()
		if !more {
			return RR{}, false
		}
		if r.Type == TypeOPT && r.Section == SectionAdditional && m[r.Off] == 0 {
			return r, true
		}
	}
}

// NextOption reads the EDNS option at data[off:]: its code, value and the
// offset of the next one; ok is false at the end or when the option runs
// past data.
func NextOption(data []byte, off int) (code uint16, value []byte, next int, ok bool) {
	if off+4 > len(data) {
		return 0, nil, off, false
	}
	code = binary.BigEndian.Uint16(data[off:])
	end := off + 4 + int(binary.BigEndian.Uint16(data[off+2:]))
	if end > len(data) {
		return 0, nil, off, false
	}
	return code, data[off+4 : end], end, true
}

// HasOption reports whether the options data carry one with code.
func HasOption(data []byte, code uint16) bool {
	for off := 0; ; {
		c, _, next, ok := NextOption(data, off)
		if !ok {
			return false
		}
		if c == code {
			return true
		}
		off = next
	}
}

// AppendRRExpanded appends the record rr of m with every name in it
// written out in full: the owner and, for the types whose RDATA may be
// compressed (RFC 3597 §4, and MX, SRV and the like that some servers
// compress too), the names in the RDATA. The copy stands on its own, so
// it can be moved to another message.
func AppendRRExpanded(dst, m []byte, rr RR) ([]byte, error) {
	start := len(dst)
	dst, _, err := AppendNameWire(dst, m, rr.Off)
	if err != nil {
		return dst[:start], err
	}
	dst = binary.BigEndian.AppendUint16(dst, rr.Type)
	dst = binary.BigEndian.AppendUint16(dst, rr.Class)
	dst = binary.BigEndian.AppendUint32(dst, rr.TTL)
	lenAt := len(dst)
	dst = append(dst, 0, 0)
	names, fixed := rdataNames(rr.Type)
	off := rr.Data
	if names > 0 && off+fixed <= rr.End {
		dst = append(dst, m[off:off+fixed]...)
		off += fixed
		for ; names > 0 && off < rr.End; names-- {
			if dst, off, err = AppendNameWire(dst, m, off); err != nil {
				return dst[:start], err
			}
			if off > rr.End {
				return dst[:start], ErrShort
			}
		}
	}
	dst = append(dst, m[off:rr.End]...)
	binary.BigEndian.PutUint16(dst[lenAt:], uint16(len(dst)-lenAt-2))
	return dst, nil
}

// rdataNames says where the names in a type's RDATA are: how many, after
// how many fixed bytes.
func rdataNames(t uint16) (names, fixed int) {
	switch t {
	case TypeNS, TypeMD, TypeMF, TypeCNAME, TypeMB, TypeMG, TypeMR, TypePTR, TypeDNAME:
		return 1, 0
	case TypeSOA, TypeMINFO, TypeRP:
		return 2, 0
	case TypeMX, TypeAFSDB, TypeRT, TypeKX:
		return 1, 2
	case TypePX:
		return 2, 2
	case TypeSRV:
		return 1, 6
	}
	return 0, 0
}
