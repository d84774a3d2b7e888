package dnswire

import (
	"encoding/binary"
	"errors"
)

// ErrTooLong is returned by Builder.Finish for a message past 65535 bytes.
var ErrTooLong = errors.New("dnswire: message longer than 65535 bytes")

// Builder appends one message to a buffer: the header, then questions,
// then records section by section, in that order. Names are compressed
// (RFC 1035 §4.1.4) against the names written before them: owners, and
// the names in the RDATA of the types RFC 3597 §4 lets be compressed.
// A Builder is not copied once used.
type Builder struct {
	buf    []byte
	start  int
	counts [4]uint16
	// names are the offsets (in the message) of the labels written out in
	// full, which later names may point to.
	names []uint16
	room  [16]uint16
}

// NewBuilder starts a message with h (its counts are ignored: Finish
// writes them) after dst.
func NewBuilder(dst []byte, h Header) Builder {
	b := Builder{buf: dst, start: len(dst)}
	h.Counts = [4]uint16{}
	b.buf = AppendHeader(b.buf, h)
	return b
}

// Question appends a question; name is an uncompressed wire name.
func (b *Builder) Question(name []byte, qtype, qclass uint16) {
	b.name(name)
	b.buf = binary.BigEndian.AppendUint16(b.buf, qtype)
	b.buf = binary.BigEndian.AppendUint16(b.buf, qclass)
	b.counts[0]++
}

// name appends an uncompressed wire name, its longest suffix already in
// the message written as a pointer to it. Suffixes match byte for byte,
// so a pointer never changes a name's case.
func (b *Builder) name(name []byte) {
	i := 0
	for ; i < len(name) && name[i] != 0; i += 1 + int(name[i]) {
		if p := b.find(name[i:]); p >= 0 {
			b.labels(name[:i])
			b.buf = binary.BigEndian.AppendUint16(b.buf, 0xC000|uint16(p))
			return
		}
	}
	b.labels(name[:i])
	b.buf = append(b.buf, 0)
}

// maxCompressionTargets bounds the label offsets a Builder remembers, so
// a message with thousands of names (an upstream reply copied whole)
// costs a bounded scan per name: later names compress against the first
// ones only.
const maxCompressionTargets = 256

// labels appends the labels ls, remembering where each starts.
func (b *Builder) labels(ls []byte) {
	if b.names == nil {
		b.names = b.room[:0]
	}
	for j := 0; j < len(ls); j += 1 + int(ls[j]) {
		if off := len(b.buf) - b.start + j; off < 0x4000 && len(b.names) < maxCompressionTargets {
			b.names = append(b.names, uint16(off))
		}
	}
	b.buf = append(b.buf, ls...)
}

// find returns the offset of a name in the message equal to suffix, or -1.
func (b *Builder) find(suffix []byte) int {
	m := b.buf[b.start:]
	for _, o := range b.names {
		if nameAtIs(m, int(o), suffix) {
			return int(o)
		}
	}
	return -1
}

// nameAtIs reports whether the name at m[off:] is want, byte for byte.
func nameAtIs(m []byte, off int, want []byte) bool {
	i := 0
	for hops := 0; hops < maxPointers; {
		if off >= len(m) || i >= len(want) {
			return false
		}
		l := int(m[off])
		if l&0xC0 == 0xC0 {
			if off+1 >= len(m) {
				return false
			}
			off = int(binary.BigEndian.Uint16(m[off:]) & 0x3FFF)
			hops++
			continue
		}
		if off+1+l > len(m) || i+1+l > len(want) || string(m[off:off+1+l]) != string(want[i:i+1+l]) {
			return false
		}
		if l == 0 {
			return i+1 == len(want)
		}
		off += 1 + l
		i += 1 + l
	}
	return false
}

// rrHeader appends a record's owner and fixed part with RDLENGTH 0, and
// returns where RDLENGTH is.
func (b *Builder) rrHeader(s Section, name []byte, typ, class uint16, ttl uint32) int {
	b.counts[1+s]++
	b.name(name)
	b.buf = binary.BigEndian.AppendUint16(b.buf, typ)
	b.buf = binary.BigEndian.AppendUint16(b.buf, class)
	b.buf = binary.BigEndian.AppendUint32(b.buf, ttl)
	b.buf = append(b.buf, 0, 0)
	return len(b.buf) - 2
}

func (b *Builder) setRdlen(at int) {
	binary.BigEndian.PutUint16(b.buf[at:], uint16(len(b.buf)-at-2))
}

// RR appends a record to section s with rdata as it is.
func (b *Builder) RR(s Section, name []byte, typ, class uint16, ttl uint32, rdata []byte) {
	at := b.rrHeader(s, name, typ, class, ttl)
	b.buf = append(b.buf, rdata...)
	b.setRdlen(at)
}

// NameRR appends a record whose RDATA is one name (CNAME, PTR, NS).
func (b *Builder) NameRR(s Section, name []byte, typ, class uint16, ttl uint32, target []byte) {
	at := b.rrHeader(s, name, typ, class, ttl)
	b.name(target)
	b.setRdlen(at)
}

// CopyRR appends the record rr of the message m to section s, its names
// read through m's compression and compressed again in this message.
// On error nothing is appended.
func (b *Builder) CopyRR(s Section, m []byte, rr RR) error {
	var buf [MaxNameLen]byte
	owner, _, err := AppendNameWire(buf[:0], m, rr.Off)
	if err != nil {
		return err
	}
	mark, names := len(b.buf), len(b.names)
	undo := func(err error) error {
		b.buf, b.names = b.buf[:mark], b.names[:names]
		b.counts[1+s]--
		return err
	}
	at := b.rrHeader(s, owner, rr.Type, rr.Class, rr.TTL)
	n, fixed := rdataNames(rr.Type)
	off := rr.Data
	if n > 0 && off+fixed <= rr.End {
		b.buf = append(b.buf, m[off:off+fixed]...)
		off += fixed
		// RDATA that ends before a name (as miekg/dns reads it) is
		// copied as it is.
		for ; n > 0 && off < rr.End; n-- {
			name, next, err := AppendNameWire(buf[:0], m, off)
			if err != nil {
				return undo(err)
			}
			if next > rr.End {
				return undo(ErrShort)
			}
			if compressible(rr.Type) {
				b.name(name)
			} else {
				b.buf = append(b.buf, name...)
			}
			off = next
		}
	}
	b.buf = append(b.buf, m[off:rr.End]...)
	b.setRdlen(at)
	return nil
}

// compressible reports whether names in t's RDATA may be compressed
// (RFC 3597 §4: the types of RFC 1035).
func compressible(t uint16) bool {
	switch t {
	case TypeNS, TypeMD, TypeMF, TypeCNAME, TypeSOA, TypeMB, TypeMG, TypeMR, TypePTR, TypeMINFO, TypeMX:
		return true
	}
	return false
}

// OPT appends an OPT record (to the additional section): the UDP size,
// the TTL field (extended rcode, version, DO) and the options.
func (b *Builder) OPT(udpSize uint16, ttl uint32, options []byte) {
	b.RR(SectionAdditional, []byte{0}, TypeOPT, udpSize, ttl, options)
}

// Len is the message's length so far.
func (b *Builder) Len() int { return len(b.buf) - b.start }

// Finish writes the counts and returns the buffer with the message
// appended.
func (b *Builder) Finish() ([]byte, error) {
	m := b.buf[b.start:]
	for i, c := range b.counts {
		binary.BigEndian.PutUint16(m[OffQDCount+2*i:], c)
	}
	if len(m) > MaxMsgSize {
		return b.buf[:b.start], ErrTooLong
	}
	return b.buf, nil
}

// AppendOption appends an EDNS option.
func AppendOption(dst []byte, code uint16, value []byte) []byte {
	dst = binary.BigEndian.AppendUint16(dst, code)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(value)))
	return append(dst, value...)
}

// AppendEDE appends an Extended DNS Error option (RFC 8914): info-code
// and extra text.
func AppendEDE(dst []byte, code uint16, text string) []byte {
	dst = binary.BigEndian.AppendUint16(dst, EDNS0EDE)
	dst = binary.BigEndian.AppendUint16(dst, uint16(2+len(text)))
	dst = binary.BigEndian.AppendUint16(dst, code)
	return append(dst, text...)
}
