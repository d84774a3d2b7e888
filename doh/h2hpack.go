//go:build !wasip1

package doh

// respEncoder writes response header blocks (RFC 7541) for one
// connection. It replaces hpack.Encoder on the response path, which
// profiled at a fifth of the HTTP/2 server's own CPU per forwarded
// question: a map lookup per field in two tables and Huffman coding of
// every string. A DoH response carries a handful of fields from a small
// known set, so:
//
//   - strings go out as they are, not Huffman coded: a few bytes more
//     for the first of each value, no work per byte;
//   - the fields that repeat from response to response (content-type,
//     vary, date, cache-control ...) are added to the dynamic table and
//     sent as one index byte after that; the table is kept small
//     (encTableSize), so finding a field is a short scan;
//   - the fields that change every time (content-length, server-timing,
//     traceresponse) are never added; their names come from the static
//     table, or from an entry of the dynamic table with that name.
//
// The encoder's table is never larger than the decoder's: entries are
// evicted oldest first, as the decoder does, so an index names the same
// field on both sides. A client that lowers SETTINGS_HEADER_TABLE_SIZE
// gets a dynamic table size update at the start of the next block.
type respEncoder struct {
	ents       []hpackEntry // the dynamic table, oldest first
	size       uint32       // its size in HPACK's count
	max        uint32       // its maximum: min(encTableSize, the client's limit)
	sizeUpdate bool         // max changed: say so at the start of the next block
}

type hpackEntry struct {
	name, value string
	size        uint32
}

// encTableSize is the most of the client's table the encoder uses: room
// for the repeating fields of a response and a few dates.
const encTableSize = 1024

// staticTableLen is the number of entries of HPACK's static table;
// dynamic indices follow it.
const staticTableLen = 61

func newRespEncoder() *respEncoder {
	return &respEncoder{max: encTableSize}
}

// setLimit takes the client's SETTINGS_HEADER_TABLE_SIZE.
func (e *respEncoder) setLimit(v uint32) {
	m := min(v, encTableSize)
	if m == e.max {
		return
	}
	e.max, e.sizeUpdate = m, true
	e.evict(0)
}

// begin starts a header block.
func (e *respEncoder) begin(b []byte) []byte {
	if e.sizeUpdate {
		e.sizeUpdate = false
		b = appendHpackInt(b, 0x20, 5, uint64(e.max))
	}
	return b
}

// appendStatus appends :status.
func (e *respEncoder) appendStatus(b []byte, status int) []byte {
	if i := staticStatus(status); i != 0 {
		return append(b, 0x80|i)
	}
	b = append(b, 0x08) // literal without indexing, name :status (8)
	return appendHpackString(b, itoa(status))
}

// appendField appends one field; name is lower case.
func (e *respEncoder) appendField(b []byte, name, value string) []byte {
	nameIdx := 0
	for i := len(e.ents) - 1; i >= 0; i-- {
		en := &e.ents[i]
		if en.name != name {
			continue
		}
		idx := staticTableLen + len(e.ents) - i
		if en.value == value {
			return appendHpackInt(b, 0x80, 7, uint64(idx))
		}
		if nameIdx == 0 {
			nameIdx = idx
		}
	}
	if s := staticName(name); s != 0 {
		nameIdx = int(s)
	}
	if repeats(name) || nameIdx == 0 {
		// With incremental indexing: the next response names it (or, for
		// a name of neither table, its name) with an index.
		b = appendHpackInt(b, 0x40, 6, uint64(nameIdx))
		if nameIdx == 0 {
			b = appendHpackString(b, name)
		}
		b = appendHpackString(b, value)
		e.add(name, value)
		return b
	}
	b = appendHpackInt(b, 0x00, 4, uint64(nameIdx)) // without indexing
	return appendHpackString(b, value)
}

// add puts a field in the dynamic table, evicting what it must.
func (e *respEncoder) add(name, value string) {
	size := uint32(len(name) + len(value) + 32)
	if size > e.max {
		e.evict(e.max) // an entry larger than the table empties it (RFC 7541 4.4)
		return
	}
	e.evict(size)
	e.ents = append(e.ents, hpackEntry{name, value, size})
	e.size += size
}

// evict drops the oldest entries until room more bytes fit.
func (e *respEncoder) evict(room uint32) {
	n := 0
	for n < len(e.ents) && e.size+room > e.max {
		e.size -= e.ents[n].size
		n++
	}
	if n > 0 {
		k := copy(e.ents, e.ents[n:])
		clear(e.ents[k:])
		e.ents = e.ents[:k]
	}
}

// repeats reports whether a response field of that name usually has the
// value it had in the response before: worth a dynamic table entry.
func repeats(name string) bool {
	switch name {
	case "date", "content-type", "cache-control", "vary", "x-content-type-options", "allow":
		return true
	}
	return false
}

// staticStatus is the static table index of :status status, or 0.
func staticStatus(status int) byte {
	switch status {
	case 200:
		return 8
	case 204:
		return 9
	case 206:
		return 10
	case 304:
		return 11
	case 400:
		return 12
	case 404:
		return 13
	case 500:
		return 14
	}
	return 0
}

// staticName is the static table index of the first entry named name, or
// 0: the names a response carries.
func staticName(name string) byte {
	switch name {
	case "accept-ranges":
		return 18
	case "access-control-allow-origin":
		return 20
	case "age":
		return 21
	case "allow":
		return 22
	case "cache-control":
		return 24
	case "content-disposition":
		return 25
	case "content-encoding":
		return 26
	case "content-language":
		return 27
	case "content-length":
		return 28
	case "content-location":
		return 29
	case "content-range":
		return 30
	case "content-type":
		return 31
	case "date":
		return 33
	case "etag":
		return 34
	case "expires":
		return 36
	case "last-modified":
		return 44
	case "link":
		return 45
	case "location":
		return 46
	case "retry-after":
		return 53
	case "server":
		return 54
	case "set-cookie":
		return 55
	case "strict-transport-security":
		return 56
	case "vary":
		return 59
	case "via":
		return 60
	case "www-authenticate":
		return 61
	}
	return 0
}

// appendHpackInt appends i with an n-bit prefix, the high bits of the
// first byte being first (RFC 7541 5.1).
func appendHpackInt(b []byte, first byte, n uint, i uint64) []byte {
	k := uint64(1)<<n - 1
	if i < k {
		return append(b, first|byte(i))
	}
	b = append(b, first|byte(k))
	i -= k
	for i >= 128 {
		b = append(b, byte(i&0x7f|0x80))
		i >>= 7
	}
	return append(b, byte(i))
}

// appendHpackString appends s as a string literal, not Huffman coded.
func appendHpackString(b []byte, s string) []byte {
	b = appendHpackInt(b, 0, 7, uint64(len(s)))
	return append(b, s...)
}
