package dnswire

import (
	"encoding/binary"
	"errors"
)

// ErrTooLong is returned by Builder.Finish for a message past 65535 bytes.
var ErrTooLong = errors.New("dnswire: message longer than 65535 bytes")

// Builder appends one message to a buffer: the header, then questions,
// then records section by section, in that order. Owner and target names
// equal to the first question's name are written as a pointer to it (the
// compression every reply here can use; other names go out in full).
type Builder struct {
	buf    []byte
	start  int
	qname  []byte // the first question's name, uncompressed
	qoff   int    // its offset in the message
	counts [4]uint16
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
	if b.qname == nil && len(name) > 1 {
		b.qname, b.qoff = name, len(b.buf)-b.start
	}
	b.buf = append(b.buf, name...)
	b.buf = binary.BigEndian.AppendUint16(b.buf, qtype)
	b.buf = binary.BigEndian.AppendUint16(b.buf, qclass)
	b.counts[0]++
}

// name appends an uncompressed wire name, as a pointer when it is the
// question's name (byte for byte: a pointer keeps the question's case).
func (b *Builder) name(name []byte) {
	if b.qname != nil && string(name) == string(b.qname) && b.qoff < 0x4000 {
		b.buf = binary.BigEndian.AppendUint16(b.buf, 0xC000|uint16(b.qoff))
		return
	}
	b.buf = append(b.buf, name...)
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

// RawRR appends a record already in wire form with no compression
// pointers (AppendRRExpanded) to section s.
func (b *Builder) RawRR(s Section, rr []byte) {
	b.counts[1+s]++
	b.buf = append(b.buf, rr...)
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
