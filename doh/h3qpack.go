//go:build !wasip1

package doh

import "errors"

// QPACK (RFC 9204) for the HTTP/3 server, with its static table only:
// the server announces no dynamic table (SETTINGS_QPACK_MAX_TABLE_CAPACITY
// stays 0), so every field section stands alone. It shares HPACK's
// integers and Huffman code with the HTTP/2 server (h2hpackdecode.go):
// the decoder writes Huffman-coded literals through the 12-bit table
// into one scratch buffer, and static names and values are the table's
// own strings; the encoder writes no Huffman at all (a DoH response's
// fields are few and short, and encoding them was a tenth of an HTTP/3
// cache hit's CPU through quic-go/qpack). FuzzH3Fields holds the decoder
// to quic-go/qpack's.

var (
	errQPACKTruncated = errors.New("qpack: field section truncated")
	errQPACKDynamic   = errors.New("qpack: reference to the dynamic table, which is not allowed")
	errQPACKIndex     = errors.New("qpack: static table index out of range")
	errQPACKBadPrefix = errors.New("qpack: Required Insert Count or Base not zero")
)

// qpackDecoder decodes field sections; its scratch buffer is reused.
type qpackDecoder struct {
	buf []byte
}

// decode calls emit for each field of block, in order. The strings
// handed over are the static table's, or new ones: emit may keep them.
func (d *qpackDecoder) decode(block []byte, emit func(name, value string) error) error {
	// The prefix: Required Insert Count and Base, both 0 without a
	// dynamic table (RFC 9204 section 4.5.1).
	ric, p, err := hpackInt(block, 8)
	if err != nil {
		return errQPACKTruncated
	}
	base, p, err := hpackInt(p, 7)
	if err != nil {
		return errQPACKTruncated
	}
	if ric != 0 || base != 0 {
		return errQPACKBadPrefix
	}
	for len(p) > 0 {
		var name, value string
		b := p[0]
		switch {
		case b&0x80 != 0: // indexed field line
			if b&0x40 == 0 {
				return errQPACKDynamic
			}
			var i uint64
			if i, p, err = hpackInt(p, 6); err != nil {
				return errQPACKTruncated
			}
			if i >= uint64(len(qpackStatic)) {
				return errQPACKIndex
			}
			name, value = qpackStatic[i].name, qpackStatic[i].value
		case b&0xc0 == 0x40: // literal with name reference
			if b&0x10 == 0 {
				return errQPACKDynamic
			}
			var i uint64
			if i, p, err = hpackInt(p, 4); err != nil {
				return errQPACKTruncated
			}
			if i >= uint64(len(qpackStatic)) {
				return errQPACKIndex
			}
			name = qpackStatic[i].name
			if value, p, err = d.readString(p, 7); err != nil {
				return err
			}
		case b&0xe0 == 0x20: // literal with literal name
			if name, p, err = d.readString(p, 3); err != nil {
				return err
			}
			if value, p, err = d.readString(p, 7); err != nil {
				return err
			}
		default: // the post-base forms refer to the dynamic table
			return errQPACKDynamic
		}
		if err := emit(name, value); err != nil {
			return err
		}
	}
	return nil
}

// readString reads a string literal whose length has an n-bit prefix,
// the Huffman flag the bit above it.
func (d *qpackDecoder) readString(p []byte, n uint) (string, []byte, error) {
	if len(p) == 0 {
		return "", nil, errQPACKTruncated
	}
	huff := p[0]&(1<<n) != 0
	l, p, err := hpackInt(p, n)
	if err != nil || uint64(len(p)) < l {
		return "", nil, errQPACKTruncated
	}
	s, rest := p[:l], p[l:]
	if !huff {
		return string(s), rest, nil
	}
	if d.buf, err = huffDecode(d.buf[:0], s); err != nil {
		return "", nil, errors.New("qpack: " + err.Error())
	}
	return string(d.buf), rest, nil
}

// appendQPACKPrefix appends a field section's prefix: no dynamic table.
func appendQPACKPrefix(b []byte) []byte { return append(b, 0, 0) }

// appendQPACKField appends one field: the static table's entry when it
// holds the field, a literal after the table's name when it holds the
// name, else a literal name and value; literals are not Huffman coded.
func appendQPACKField(b []byte, name, value string) []byte {
	if i, ok := qpackStaticField[HeaderField{name, value}]; ok {
		return appendHpackInt(b, 0xc0, 6, uint64(i))
	}
	if i, ok := qpackStaticName[name]; ok {
		b = appendHpackInt(b, 0x50, 4, uint64(i))
		return appendHpackString(b, value)
	}
	b = appendHpackInt(b, 0x20, 3, uint64(len(name)))
	b = append(b, name...)
	return appendHpackString(b, value)
}

// appendQPACKStatus appends :status.
func appendQPACKStatus(b []byte, status int) []byte {
	switch status {
	case 200:
		return append(b, 0xc0|25)
	case 404:
		return append(b, 0xc0|27)
	}
	return appendQPACKField(b, ":status", itoa(status))
}

// qpackStatic is QPACK's static table (RFC 9204 appendix A).
var qpackStatic = [...]struct{ name, value string }{
	{":authority", ""}, {":path", "/"}, {"age", "0"}, {"content-disposition", ""}, {"content-length", "0"},
	{"cookie", ""}, {"date", ""}, {"etag", ""}, {"if-modified-since", ""}, {"if-none-match", ""},
	{"last-modified", ""}, {"link", ""}, {"location", ""}, {"referer", ""}, {"set-cookie", ""},
	{":method", "CONNECT"}, {":method", "DELETE"}, {":method", "GET"}, {":method", "HEAD"}, {":method", "OPTIONS"},
	{":method", "POST"}, {":method", "PUT"}, {":scheme", "http"}, {":scheme", "https"}, {":status", "103"},
	{":status", "200"}, {":status", "304"}, {":status", "404"}, {":status", "503"}, {"accept", "*/*"},
	{"accept", "application/dns-message"}, {"accept-encoding", "gzip, deflate, br"}, {"accept-ranges", "bytes"},
	{"access-control-allow-headers", "cache-control"}, {"access-control-allow-headers", "content-type"},
	{"access-control-allow-origin", "*"}, {"cache-control", "max-age=0"}, {"cache-control", "max-age=2592000"},
	{"cache-control", "max-age=604800"}, {"cache-control", "no-cache"}, {"cache-control", "no-store"},
	{"cache-control", "public, max-age=31536000"}, {"content-encoding", "br"}, {"content-encoding", "gzip"},
	{"content-type", "application/dns-message"}, {"content-type", "application/javascript"},
	{"content-type", "application/json"}, {"content-type", "application/x-www-form-urlencoded"},
	{"content-type", "image/gif"}, {"content-type", "image/jpeg"}, {"content-type", "image/png"},
	{"content-type", "text/css"}, {"content-type", "text/html; charset=utf-8"}, {"content-type", "text/plain"},
	{"content-type", "text/plain;charset=utf-8"}, {"range", "bytes=0-"},
	{"strict-transport-security", "max-age=31536000"},
	{"strict-transport-security", "max-age=31536000; includesubdomains"},
	{"strict-transport-security", "max-age=31536000; includesubdomains; preload"},
	{"vary", "accept-encoding"}, {"vary", "origin"}, {"x-content-type-options", "nosniff"},
	{"x-xss-protection", "1; mode=block"}, {":status", "100"}, {":status", "204"}, {":status", "206"},
	{":status", "302"}, {":status", "400"}, {":status", "403"}, {":status", "421"}, {":status", "425"},
	{":status", "500"}, {"accept-language", ""}, {"access-control-allow-credentials", "FALSE"},
	{"access-control-allow-credentials", "TRUE"}, {"access-control-allow-headers", "*"},
	{"access-control-allow-methods", "get"}, {"access-control-allow-methods", "get, post, options"},
	{"access-control-allow-methods", "options"}, {"access-control-expose-headers", "content-length"},
	{"access-control-request-headers", "content-type"}, {"access-control-request-method", "get"},
	{"access-control-request-method", "post"}, {"alt-svc", "clear"}, {"authorization", ""},
	{"content-security-policy", "script-src 'none'; object-src 'none'; base-uri 'none'"}, {"early-data", "1"},
	{"expect-ct", ""}, {"forwarded", ""}, {"if-range", ""}, {"origin", ""}, {"purpose", "prefetch"},
	{"server", ""}, {"timing-allow-origin", "*"}, {"upgrade-insecure-requests", "1"}, {"user-agent", ""},
	{"x-forwarded-for", ""}, {"x-frame-options", "deny"}, {"x-frame-options", "sameorigin"},
}

// qpackStaticField and qpackStaticName index the static table by field
// and by name (its first entry of the name).
var qpackStaticField, qpackStaticName = func() (map[HeaderField]uint8, map[string]uint8) {
	fields, names := map[HeaderField]uint8{}, map[string]uint8{}
	for i, e := range qpackStatic {
		if e.value != "" {
			fields[HeaderField{e.name, e.value}] = uint8(i)
		}
		if _, ok := names[e.name]; !ok {
			names[e.name] = uint8(i)
		}
	}
	return fields, names
}()
