//go:build !wasip1

package doh

import (
	"encoding/binary"
	"errors"
	"slices"
	"unsafe"
)

// reqDecoder reads request header blocks (RFC 7541) for one connection.
// It replaces hpack.Decoder, whose Huffman decoding (a bit at a time
// through a tree of 256-entry nodes) and string per literal field were
// the largest part of the server's own CPU per request after the
// response encoder. It:
//
//   - decodes a whole block at once, from the frame's payload, or from a
//     buffer it reuses when the block spans CONTINUATION frames;
//   - hands the connection a field whose literal strings point into the
//     block or into a buffer reused for the next field (temp): the
//     connection copies what it keeps, and keeps little;
//   - decodes Huffman strings through a 12-bit table that yields one or
//     two symbols per lookup (every code of a URL's characters is at
//     most 12 bits long), with a canonical-code search for the rest.
//
// The dynamic table is a ring whose entries own their strings: an indexed
// field costs no copy. Its size never exceeds limit, the
// SETTINGS_HEADER_TABLE_SIZE the server announced (the default, 4096).
type reqDecoder struct {
	ents   []hpackEntry // the ring: at most limit/32 entries
	start  int          // the oldest entry
	n      int          // the number of entries
	size   uint32       // the table's size in HPACK's count
	max    uint32       // its maximum, from the last size update
	limit  uint32       // the most a size update may ask
	maxStr int          // the longest string literal, coded or decoded
	buf    []byte       // Huffman-decoded strings of the field being read
	blk    []byte       // a block that spans frames
	emit   func(reqField)
}

// reqField is one decoded field. A string whose temp bit is set points
// into memory that is reused after the call: copy it to keep it.
type reqField struct {
	name, value string
	temp        uint8 // tempName | tempValue
}

const (
	tempName  = 1
	tempValue = 2
)

// size is the field's size in HPACK's count (RFC 7541 4.1).
func (f *reqField) size() int { return len(f.name) + len(f.value) + 32 }

var (
	errHpackTruncated   = errors.New("hpack: truncated header block")
	errHpackIntOverflow = errors.New("hpack: integer overflow")
	errHpackIndex       = errors.New("hpack: invalid index")
	errHpackSizeUpdate  = errors.New("hpack: dynamic table size update above the limit")
	errHpackLateUpdate  = errors.New("hpack: dynamic table size update after a field")
	errHpackStringLen   = errors.New("hpack: string literal too long")
	errHpackHuffman     = errors.New("hpack: invalid Huffman-coded string")
)

func newReqDecoder(limit uint32, maxStr int, emit func(reqField)) *reqDecoder {
	return &reqDecoder{max: limit, limit: limit, maxStr: maxStr, emit: emit}
}

// write takes a fragment of a header block; at the block's end it
// decodes the block. A block in one frame is decoded where it lies.
func (d *reqDecoder) write(frag []byte, first, end bool) error {
	if first && end {
		return d.decode(frag)
	}
	if first {
		d.blk = d.blk[:0]
	}
	d.blk = append(d.blk, frag...)
	if !end {
		return nil
	}
	err := d.decode(d.blk)
	if cap(d.blk) > 64<<10 {
		d.blk = nil
	}
	return err
}

// decode reads one complete header block.
func (d *reqDecoder) decode(p []byte) error {
	atStart := true
	for len(p) > 0 {
		b := p[0]
		if b&0xe0 == 0x20 { // dynamic table size update (6.3)
			if !atStart {
				return errHpackLateUpdate
			}
			v, rest, err := hpackInt(p, 5)
			if err != nil {
				return err
			}
			if v > uint64(d.limit) {
				return errHpackSizeUpdate
			}
			d.max, p = uint32(v), rest
			d.evict(0)
			continue
		}
		atStart = false
		if b&0x80 != 0 { // indexed field (6.1)
			i, rest, err := hpackInt(p, 7)
			if err != nil {
				return err
			}
			e := d.at(i)
			if e == nil {
				return errHpackIndex
			}
			p = rest
			d.emit(reqField{name: e.name, value: e.value})
			continue
		}
		// Literals: with incremental indexing (6.2.1, 6-bit index), without
		// indexing and never indexed (6.2.2, 6.2.3, 4-bit index).
		indexing := b&0xc0 == 0x40
		prefix := uint(4)
		if indexing {
			prefix = 6
		}
		i, rest, err := hpackInt(p, prefix)
		if err != nil {
			return err
		}
		p = rest
		d.buf = d.buf[:0]
		var f reqField
		var name []byte
		if i == 0 {
			if name, p, err = d.readString(p); err != nil {
				return err
			}
			f.temp = tempName
		} else {
			e := d.at(i)
			if e == nil {
				return errHpackIndex
			}
			f.name = e.name
		}
		value, rest, err := d.readString(p)
		if err != nil {
			return err
		}
		p = rest
		if indexing {
			// The table keeps the strings: one allocation for both.
			k := len(d.buf)
			d.buf = append(append(d.buf, name...), value...)
			s := string(d.buf[k:])
			if f.temp&tempName != 0 {
				f.name = s[:len(name)]
			}
			f.value, f.temp = s[len(name):], 0
			d.add(f.name, f.value)
		} else {
			if f.temp&tempName != 0 {
				f.name = unsafe.String(unsafe.SliceData(name), len(name))
			}
			f.value = unsafe.String(unsafe.SliceData(value), len(value))
			f.temp |= tempValue
		}
		d.emit(f)
	}
	return nil
}

// readString reads a string literal (5.2): its bytes in p, or decoded
// into d.buf.
func (d *reqDecoder) readString(p []byte) (s, rest []byte, err error) {
	if len(p) == 0 {
		return nil, nil, errHpackTruncated
	}
	huff := p[0]&0x80 != 0
	n, p, err := hpackInt(p, 7)
	if err != nil {
		return nil, nil, err
	}
	if n > uint64(d.maxStr) {
		return nil, nil, errHpackStringLen
	}
	if n > uint64(len(p)) {
		return nil, nil, errHpackTruncated
	}
	s, rest = p[:n], p[n:]
	if !huff {
		return s, rest, nil
	}
	start := len(d.buf)
	if d.buf, err = huffDecode(d.buf, s); err != nil {
		return nil, nil, err
	}
	if len(d.buf)-start > d.maxStr {
		return nil, nil, errHpackStringLen
	}
	return d.buf[start:], rest, nil
}

// hpackInt reads an integer with an n-bit prefix (5.1). Like x/net's, it
// gives up past 63 bits of continuation; callers bound the value.
func hpackInt(p []byte, n uint) (uint64, []byte, error) {
	if len(p) == 0 {
		return 0, nil, errHpackTruncated
	}
	k := uint64(1)<<n - 1
	i := uint64(p[0]) & k
	p = p[1:]
	if i < k {
		return i, p, nil
	}
	var m uint
	for len(p) > 0 {
		b := p[0]
		p = p[1:]
		i += uint64(b&0x7f) << m
		if b&0x80 == 0 {
			return i, p, nil
		}
		m += 7
		if m >= 63 {
			return 0, nil, errHpackIntOverflow
		}
	}
	return 0, nil, errHpackTruncated
}

// at is the entry of index i (2.3.3), or nil.
func (d *reqDecoder) at(i uint64) *hpackEntry {
	switch {
	case i == 0:
		return nil
	case i <= staticTableLen:
		return &staticTable[i-1]
	case i-staticTableLen > uint64(d.n):
		return nil
	}
	k := d.start + d.n - int(i-staticTableLen)
	if k >= len(d.ents) {
		k -= len(d.ents)
	}
	return &d.ents[k]
}

// add puts a field in the dynamic table, evicting what it must (4.4).
func (d *reqDecoder) add(name, value string) {
	size := uint32(len(name) + len(value) + 32)
	if size > d.max {
		d.evict(d.max)
		return
	}
	d.evict(size)
	if d.ents == nil {
		d.ents = make([]hpackEntry, d.limit/32)
	}
	k := d.start + d.n
	if k >= len(d.ents) {
		k -= len(d.ents)
	}
	d.ents[k] = hpackEntry{name, value, size}
	d.n++
	d.size += size
}

// evict drops the oldest entries until room more bytes fit.
func (d *reqDecoder) evict(room uint32) {
	for d.n > 0 && d.size+room > d.max {
		d.size -= d.ents[d.start].size
		d.ents[d.start] = hpackEntry{}
		d.start++
		if d.start == len(d.ents) {
			d.start = 0
		}
		d.n--
	}
}

// staticTable is HPACK's static table (Appendix A).
var staticTable = [staticTableLen]hpackEntry{
	{":authority", "", 42}, {":method", "GET", 42}, {":method", "POST", 43},
	{":path", "/", 38}, {":path", "/index.html", 48}, {":scheme", "http", 43},
	{":scheme", "https", 44}, {":status", "200", 42}, {":status", "204", 42},
	{":status", "206", 42}, {":status", "304", 42}, {":status", "400", 42},
	{":status", "404", 42}, {":status", "500", 42}, {"accept-charset", "", 46},
	{"accept-encoding", "gzip, deflate", 60}, {"accept-language", "", 47},
	{"accept-ranges", "", 45}, {"accept", "", 38}, {"access-control-allow-origin", "", 59},
	{"age", "", 35}, {"allow", "", 37}, {"authorization", "", 45},
	{"cache-control", "", 45}, {"content-disposition", "", 51}, {"content-encoding", "", 48},
	{"content-language", "", 48}, {"content-length", "", 46}, {"content-location", "", 48},
	{"content-range", "", 45}, {"content-type", "", 44}, {"cookie", "", 38},
	{"date", "", 36}, {"etag", "", 36}, {"expect", "", 38},
	{"expires", "", 39}, {"from", "", 36}, {"host", "", 36},
	{"if-match", "", 40}, {"if-modified-since", "", 49}, {"if-none-match", "", 45},
	{"if-range", "", 40}, {"if-unmodified-since", "", 51}, {"last-modified", "", 45},
	{"link", "", 36}, {"location", "", 40}, {"max-forwards", "", 44},
	{"proxy-authenticate", "", 50}, {"proxy-authorization", "", 51}, {"range", "", 37},
	{"referer", "", 39}, {"refresh", "", 39}, {"retry-after", "", 43},
	{"server", "", 38}, {"set-cookie", "", 42}, {"strict-transport-security", "", 57},
	{"transfer-encoding", "", 49}, {"user-agent", "", 42}, {"vary", "", 36},
	{"via", "", 35}, {"www-authenticate", "", 48},
}

// Huffman decoding (5.2). huffFast maps the next 12 bits of input to the
// one or two symbols whose codes they begin with:
//
//	bits 0-7 the first symbol, 8-15 the second, 16-20 the first code's
//	length, 21-25 the length of both, 26-27 the number of symbols (0: the
//	code is longer than 12 bits).
//
// Codes longer than 12 bits are canonical: those of one length are
// consecutive numbers, so huffLong finds them by length.
var huffFast [1 << huffFastBits]uint32

const huffFastBits = 12

var huffLong struct {
	first [31]uint32 // the first code of each length
	count [31]uint16 // the number of codes of each length
	base  [31]uint16 // the index in syms of the first
	syms  [257]uint16
}

func init() {
	type code struct {
		sym  uint16
		code uint32
		len  uint8
	}
	codes := make([]code, 0, 257)
	for s := range 256 {
		codes = append(codes, code{uint16(s), huffCode[s], huffLen[s]})
	}
	codes = append(codes, code{256, 1<<30 - 1, 30}) // EOS
	// By length, then code.
	for i := 1; i < len(codes); i++ {
		for j := i; j > 0 && (codes[j].len < codes[j-1].len || codes[j].len == codes[j-1].len && codes[j].code < codes[j-1].code); j-- {
			codes[j], codes[j-1] = codes[j-1], codes[j]
		}
	}
	l := &huffLong
	for i, c := range codes {
		if l.count[c.len] == 0 {
			l.first[c.len], l.base[c.len] = c.code, uint16(i)
		} else if c.code != l.first[c.len]+uint32(l.count[c.len]) {
			panic("hpack: Huffman code not canonical")
		}
		l.count[c.len]++
		l.syms[i] = c.sym
	}
	one := func(v uint32, bits uint) (sym, n uint32, ok bool) {
		for _, c := range codes {
			if uint(c.len) > bits {
				break
			}
			if v>>(bits-uint(c.len)) == c.code {
				return uint32(c.sym), uint32(c.len), true
			}
		}
		return 0, 0, false
	}
	for v := range uint32(1 << huffFastBits) {
		s1, n1, ok := one(v, huffFastBits)
		if !ok {
			continue
		}
		e := s1 | n1<<16 | n1<<21 | 1<<26
		rest := huffFastBits - uint(n1)
		if s2, n2, ok := one(v&(1<<rest-1), rest); ok {
			e = s1 | s2<<8 | n1<<16 | (n1+n2)<<21 | 2<<26
		}
		huffFast[v] = e
	}
}

// huffDecode appends the decoding of src to dst. Padding must be at most
// seven bits, all ones, and EOS must not appear (5.2).
func huffDecode(dst, src []byte) ([]byte, error) {
	dst = slices.Grow(dst, len(src)*8/5+2) // the shortest code is 5 bits; one byte of slack
	out := dst[len(dst):cap(dst)]
	j := 0
	// acc holds the n unread bits at its top, zeros below: the next
	// lookup is its top huffFastBits, and a code is consumed by a shift.
	var acc uint64
	var n uint
	for {
		if len(src) >= 8 {
			// As many whole bytes as fit, in one load.
			k := (64 - n) / 8
			acc |= binary.BigEndian.Uint64(src) >> (64 - 8*k) << (64 - n - 8*k)
			src, n = src[k:], n+8*k
		}
		for n <= 56 && len(src) > 0 {
			acc |= uint64(src[0]) << (56 - n)
			src, n = src[1:], n+8
		}
		for n >= huffFastBits {
			e := huffFast[acc>>(64-huffFastBits)]
			if e>>26 == 0 {
				break // a longer code
			}
			// Without a branch on the number of symbols, which the
			// processor cannot predict: the second byte is written
			// always and counted only when it is a symbol.
			out[j], out[j+1] = byte(e), byte(e>>8)
			l := uint(e >> 21 & 31)
			j, n, acc = j+int(e>>26), n-l, acc<<l
		}
		if len(src) > 0 && n <= 56 {
			continue // more bits first
		}
		// The end of the input, or a code longer than huffFastBits.
		if n == 0 {
			return dst[:len(dst)+j], nil
		}
		if n >= huffFastBits {
			sym, l, ok := huffSlow(acc, n)
			if ok && sym != 256 { // EOS is an error
				out[j] = byte(sym)
				j, n, acc = j+1, n-l, acc<<l
				continue
			}
			return dst, errHpackHuffman
		}
		// Fewer bits than a lookup takes: the table, the missing bits
		// zero, finds a code if one ends within them.
		e := huffFast[acc>>(64-huffFastBits)]
		if l := uint(e >> 16 & 31); e>>26 != 0 && l <= n {
			out[j] = byte(e)
			j, n, acc = j+1, n-l, acc<<l
			continue
		}
		// No whole code left: padding, a prefix of EOS.
		if n > 7 || acc>>(64-n) != 1<<n-1 {
			return dst, errHpackHuffman
		}
		return dst[:len(dst)+j], nil
	}
}

// huffSlow decodes a code longer than huffFastBits from the top of acc,
// which holds n bits.
func huffSlow(acc uint64, n uint) (sym uint16, l uint, ok bool) {
	h := &huffLong
	for l = huffFastBits + 1; l <= 30 && l <= n; l++ {
		c := uint32(acc >> (64 - l))
		if d := c - h.first[l]; h.count[l] != 0 && c >= h.first[l] && d < uint32(h.count[l]) {
			return h.syms[uint32(h.base[l])+d], l, true
		}
	}
	return 0, 0, false
}
