package doh

import (
	"encoding/base64"
	"errors"
	"io"
	"mime"
	"net/url"
	"strconv"
	"strings"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/engine"
)

var (
	errTooLarge     = errors.New("request body too large: a DNS message is at most 65535 bytes")
	errParamTooLong = errors.New("too long for a DNS message of 65535 bytes")
)

// queryParam returns the first value of key in a raw URL query, unescaped.
// It does not build the map url.ParseQuery would: this runs for every GET.
func queryParam(raw, key string) (string, bool) {
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		k, v, _ := strings.Cut(pair, "=")
		if k != key {
			continue
		}
		if strings.ContainsAny(v, "%+") {
			u, err := url.QueryUnescape(v)
			if err != nil {
				return "", true
			}
			v = u
		}
		return v, true
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

// checkQuery reads a wire query and sorts it into one of three cases:
//   - status != 200: not a query we can answer at all (the problem says
//     why); no DNS response.
//   - reply != nil: a query answered here with a DNS error (NOTIMP,
//     FORMERR, BADVERS); problem says why.
//   - otherwise q is ready for the resolver: QR clear, opcode QUERY, one
//     question.
func checkQuery(raw []byte) (q, reply *dns.Msg, status int, problem string) {
	if len(raw) < headerSize {
		return nil, nil, statusBadRequest, "undecodable DNS message: shorter than the 12-byte header"
	}
	if raw[2]&flagQR != 0 {
		return nil, nil, statusBadRequest, "not a query: the message is a response (QR set)"
	}
	q = new(dns.Msg)
	err := q.Unpack(raw)
	if op := int(raw[2]>>3) & 0xF; op != dns.OpcodeQuery {
		// The header says what it is; answer it even if the rest is odd.
		return q, engine.ErrorReply(q, raw, dns.RcodeNotImplemented), statusOK,
			"opcode " + opcodeName(op) + " is not implemented"
	}
	if qd := int(raw[4])<<8 | int(raw[5]); qd != 1 {
		return nil, nil, statusBadRequest, "want exactly one question, QDCOUNT is " + strconv.Itoa(qd)
	}
	if err != nil {
		if len(q.Question) == 1 {
			// Header and question read: the rest is malformed.
			return q, engine.ErrorReply(q, raw, dns.RcodeFormatError), statusOK,
				"malformed DNS message: " + err.Error()
		}
		return nil, nil, statusBadRequest, "undecodable DNS message: " + err.Error()
	}
	if len(q.Question) != 1 {
		return nil, nil, statusBadRequest, "undecodable DNS message: the question is missing"
	}
	if rcode, why := queryProblem(q); rcode != dns.RcodeSuccess {
		return q, engine.ErrorReply(q, raw, rcode), statusOK, why
	}
	return q, nil, statusOK, ""
}

// queryProblem checks a parsed query with one question for what a DNS
// server would refuse to read: records in the answer or authority section,
// more than one OPT or an OPT misplaced, a meta type as the question, an
// EDNS version above 0.
func queryProblem(q *dns.Msg) (rcode int, why string) {
	if len(q.Answer) != 0 || len(q.Ns) != 0 {
		return dns.RcodeFormatError, "malformed query: records in the answer or authority section"
	}
	opts := 0
	for _, rr := range q.Extra {
		if rr.Header().Rrtype == dns.TypeOPT {
			opts++
			if rr.Header().Name != "." {
				return dns.RcodeFormatError, "malformed query: OPT record with a name other than the root"
			}
		}
	}
	if opts > 1 {
		return dns.RcodeFormatError, "malformed query: more than one OPT record"
	}
	switch q.Question[0].Qtype {
	case dns.TypeOPT, dns.TypeTSIG, dns.TypeTKEY:
		return dns.RcodeFormatError, "malformed query: " + dns.TypeToString[q.Question[0].Qtype] + " as the question type"
	case dns.TypeAXFR, dns.TypeIXFR, dns.TypeMAILA, dns.TypeMAILB:
		return dns.RcodeNotImplemented, "question type " + dns.TypeToString[q.Question[0].Qtype] + " is not implemented"
	}
	if o := q.IsEdns0(); o != nil && o.Version() != 0 {
		return dns.RcodeBadVers, "EDNS version " + strconv.Itoa(int(o.Version())) + " is not supported"
	}
	return dns.RcodeSuccess, ""
}

func opcodeName(op int) string {
	if s, ok := dns.OpcodeToString[op]; ok {
		return s
	}
	return strconv.Itoa(op)
}

// plainQueryType reports whether raw is a query that checkQuery would
// pass as it is, read from the bytes alone: QR clear, opcode QUERY, one
// question whose name is plain (uncompressed labels of letters, digits,
// '-' and '_'), no answer or authority records, and at most one record
// beside it, an OPT of EDNS version 0 whose options fill its data, ending
// the message; and the question's type. Anything else takes checkQuery's
// unpacking path, which knows every error answer; so the RFC 8484 path
// reads an ordinary query without building a dns.Msg. The name is made
// only when wanted (plainName), usually by the engine.
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
	switch qtype {
	case dns.TypeOPT, dns.TypeTSIG, dns.TypeTKEY, dns.TypeAXFR, dns.TypeIXFR, dns.TypeMAILA, dns.TypeMAILB:
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
	if len(rr) < 11 || rr[0] != 0 || rr[1] != 0 || rr[2] != byte(dns.TypeOPT) || rr[6] != 0 {
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
		// Cookie and Padding only: miekg/dns reads these whatever they
		// hold; others (ECS …) may be refused there, so checkQuery decides.
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
