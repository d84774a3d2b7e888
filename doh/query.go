package doh

import (
	"encoding/base64"
	"errors"
	"io"
	"mime"
	"net/url"
	"strings"

	"github.com/dohfwd/dohfwd/engine/dnswire"
)

var (
	errTooLarge     = errors.New("request body too large: a DNS message is at most 65535 bytes")
	errParamTooLong = errors.New("too long for a DNS message of 65535 bytes")
)

// queryParam returns the first value of key in a raw URL query, unescaped.
// It does not build the map url.ParseQuery would: this runs for every GET.
func queryParam(raw, key string) (string, bool) {
	v, ok := escapedQueryParam(raw, key)
	return unescapeParam(v), ok
}

// unescapeParam unescapes a query parameter's value; "" if it is not
// escaped right.
func unescapeParam(v string) string {
	if !strings.ContainsAny(v, "%+") {
		return v
	}
	u, err := url.QueryUnescape(v)
	if err != nil {
		return ""
	}
	return u
}

// escapedQueryParam returns the first value of key in a raw URL query,
// as sent.
func escapedQueryParam(raw, key string) (string, bool) {
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		if k, v, _ := strings.Cut(pair, "="); k == key {
			return v, true
		}
	}
	return "", false
}

func hasQueryParam(raw, key string) bool {
	_, ok := queryParam(raw, key)
	return ok
}

// maxParamLen is the longest dns parameter that can hold a message of
// MaxMessageSize bytes.
var maxParamLen = base64.RawURLEncoding.EncodedLen(MaxMessageSize)

// maxEscapedParamLen is the longest dns parameter, as sent, that can hold
// such a message: maxParamLen and padding, escaped ("%3D%3D"). Anything
// longer is refused before it is unescaped or decoded.
var maxEscapedParamLen = maxParamLen + len("%3D%3D")

// decodeDNSParam decodes a dns parameter into buf. RFC 8484 asks for
// base64url without padding; trailing '=' padding is accepted too, since
// it cannot change the bytes decoded.
func decodeDNSParam(v string, buf []byte) ([]byte, error) {
	v = strings.TrimRight(v, "=")
	if len(v) > maxParamLen {
		return buf, errParamTooLong
	}
	n := base64.RawURLEncoding.DecodedLen(len(v))
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	n, err := base64.RawURLEncoding.Decode(buf, []byte(v))
	if err != nil {
		return buf[:0], errors.New("not base64url")
	}
	return buf[:n], nil
}

// readMessage reads a request body into buf, refusing more than
// MaxMessageSize bytes whatever Content-Length said.
func readMessage(body io.Reader, buf []byte) ([]byte, error) {
	buf = buf[:0]
	for {
		if len(buf) == cap(buf) {
			grown := make([]byte, len(buf), min(2*cap(buf)+512, MaxMessageSize+1))
			copy(grown, buf)
			buf = grown
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if len(buf) > MaxMessageSize {
			return buf, errTooLarge
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// isMediaType reports whether a Content-Type header names want, ignoring
// case and parameters.
func isMediaType(header, want string) bool {
	if strings.EqualFold(header, want) {
		return true
	}
	mt, _, err := mime.ParseMediaType(header)
	return err == nil && mt == want
}

// acceptsJSON reports whether the client asks for the JSON form.
func acceptsJSON(h Header) bool {
	for i := range h {
		if h[i].Name == "accept" && containsFold(h[i].Value, MediaTypeJSON) {
			return true
		}
	}
	return false
}

// containsFold reports whether s contains lower (lower-case ASCII) with
// any ASCII letters in s in either case: what strings.Contains(
// strings.ToLower(s), lower) answers for an ASCII media type, without the
// lower-case copy, on every request's Accept.
func containsFold(s, lower string) bool {
	for i := 0; i+len(lower) <= len(s); i++ {
		j := 0
		for j < len(lower) && asciiLower(s[i+j]) == lower[j] {
			j++
		}
		if j == len(lower) {
			return true
		}
	}
	return false
}

func asciiLower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// DNS header bits and sizes, for checks before a full unpack.
const (
	headerSize = 12
	flagQR     = 0x80 // in byte 2
)

// plainQueryType reports whether raw is a query that checkQuery would
// pass as it is, read from the bytes alone: QR clear, opcode QUERY, one
// question whose name is plain (uncompressed labels of letters, digits,
// '-' and '_'), no answer or authority records, and at most one record
// beside it, an OPT of EDNS version 0 whose options fill its data, ending
// the message; and the question's type. Anything else takes checkQuery's
// full reading, which knows every error answer; so the RFC 8484 path reads
// an ordinary query without making its name, which is made only when
// wanted (plainName), usually by the engine.
func plainQueryType(raw []byte) (qtype uint16, ok bool) {
	if len(raw) < headerSize || raw[2]&(flagQR|0x78) != 0 || // QR, opcode
		raw[4] != 0 || raw[5] != 1 || raw[6]|raw[7]|raw[8]|raw[9] != 0 || raw[10] != 0 || raw[11] > 1 {
		return 0, false
	}
	off := headerSize
	for {
		if off >= len(raw) {
			return 0, false
		}
		n := int(raw[off])
		if n == 0 {
			break
		}
		if n > 63 || off+1+n > len(raw) {
			return 0, false
		}
		for _, c := range raw[off+1 : off+1+n] {
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return 0, false
			}
		}
		off += 1 + n
	}
	nameEnd := off + 1
	if nameEnd-headerSize > 255 || nameEnd+4 > len(raw) {
		return 0, false
	}
	qtype = uint16(raw[nameEnd])<<8 | uint16(raw[nameEnd+1])
	if dnswire.RefusedType(qtype) >= 0 {
		return 0, false
	}
	off = nameEnd + 4
	if raw[11] == 1 && !plainOPT(raw[off:]) || raw[11] == 0 && off != len(raw) {
		return 0, false
	}
	return qtype, true
}

// plainName is the name of a query plainQueryType found plain, in
// presentation form: its labels need no escapes.
func plainName(raw []byte) string {
	chars := 0
	for off := headerSize; raw[off] != 0; off += 1 + int(raw[off]) {
		chars += 1 + int(raw[off])
	}
	if chars == 0 {
		return "."
	}
	var b strings.Builder
	b.Grow(chars)
	for off := headerSize; raw[off] != 0; off += 1 + int(raw[off]) {
		b.Write(raw[off+1 : off+1+int(raw[off])])
		b.WriteByte('.')
	}
	return b.String()
}

// plainOPT reports whether rr is exactly one OPT record owned by the root,
// of EDNS version 0, whose options (cookie and padding) fill its data.
func plainOPT(rr []byte) bool {
	// name (1) type (2) class (2) ttl (4) rdlength (2)
	if len(rr) < 11 || rr[0] != 0 || rr[1] != 0 || rr[2] != byte(dnswire.TypeOPT) || rr[6] != 0 {
		return false
	}
	rdlen := int(rr[9])<<8 | int(rr[10])
	data := rr[11:]
	if len(data) != rdlen {
		return false
	}
	for len(data) > 0 {
		if len(data) < 4 {
			return false
		}
		// Cookie and Padding only: they read whatever they hold; others
		// (ECS …) may not, so dnswire.CheckQuery decides.
		if data[0] != 0 || data[1] != 10 && data[1] != 12 {
			return false
		}
		n := 4 + (int(data[2])<<8 | int(data[3]))
		if n > len(data) {
			return false
		}
		data = data[n:]
	}
	return true
}

// queryCheck is what checkQuery found: an HTTP error (status other
// than 200), or a DNS error to answer here (rcode ≥ 0), or a query ready
// for the resolver; problem says what is wrong. qname and qtype are the
// question's, when it read.
type queryCheck struct {
	status  int
	rcode   int
	problem string
	qname   string
	qtype   uint16
}

// checkQuery is dnswire.CheckQuery's verdict, the one every front end
// gives, in HTTP terms:
//   - status != 200: an Unreadable query, not one we can answer at all
//     (the problem says why); no DNS response.
//   - rcode ≥ 0: a Refused query, answered here with a DNS error
//     (NOTIMP, FORMERR, BADVERS); problem says why.
//   - otherwise the query is Accepted, ready for the resolver.
func checkQuery(raw []byte) queryCheck {
	v := dnswire.CheckQuery(raw)
	c := queryCheck{status: statusOK, rcode: -1, problem: v.Problem, qtype: v.Type}
	switch v.Verdict {
	case dnswire.Unreadable:
		return queryCheck{status: statusBadRequest, rcode: -1, problem: v.Problem}
	case dnswire.Refused:
		c.rcode = v.Rcode
	}
	if v.NameOff != 0 {
		c.qname, _, _ = dnswire.UnpackName(raw, v.NameOff)
	}
	return c
}
