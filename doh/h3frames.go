//go:build !wasip1

package doh

import (
	"bufio"
	"errors"
	"io"
	"strconv"
	"strings"

	"github.com/quic-go/quic-go/quicvarint"
	"golang.org/x/net/http/httpguts"
)

// HTTP/3 framing (RFC 9114 section 7) and the request rules of section
// 4, for the HTTP/3 server of this package (h3conn.go): what a request
// stream may carry, read into a [Request], and the few frames the server
// writes. Pure functions over a bufio.Reader, so FuzzH3Request feeds them
// bytes directly.

// HTTP/3 frame types (RFC 9114 section 7.2).
const (
	h3FrameData        = 0x0
	h3FrameHeaders     = 0x1
	h3FrameCancelPush  = 0x3
	h3FrameSettings    = 0x4
	h3FramePushPromise = 0x5
	h3FrameGoAway      = 0x7
	h3FrameMaxPushID   = 0xd
)

// HTTP/3 unidirectional stream types (RFC 9114 section 6.2; RFC 9204
// section 4.2).
const (
	h3StreamControl      = 0x0
	h3StreamPush         = 0x1
	h3StreamQPACKEncoder = 0x2
	h3StreamQPACKDecoder = 0x3
)

// HTTP/3 error codes (RFC 9114 section 8.1; RFC 9204 section 6).
const (
	h3NoError              = 0x0100
	h3GeneralProtocolError = 0x0101
	h3StreamCreationError  = 0x0103
	h3ClosedCriticalStream = 0x0104
	h3FrameUnexpected      = 0x0105
	h3FrameError           = 0x0106
	// h3ExcessiveLoad (0x0107) is in http3.go.
	h3SettingsError              = 0x0109
	h3MissingSettings            = 0x010a
	h3RequestRejected            = 0x010b
	h3RequestCancelled           = 0x010c
	h3RequestIncomplete          = 0x010d
	h3MessageError               = 0x010e
	h3QPACKDecompressionFailed   = 0x0200
	h3SettingMaxFieldSectionSize = 0x6
)

// h3Error is why a request stream (or, with conn, its connection) ends
// with an error code instead of an answer.
type h3Error struct {
	code   uint64
	conn   bool // the whole connection: the client broke the protocol
	reason string
}

func (e *h3Error) Error() string {
	return "http3: " + e.reason + " (code 0x" + strconv.FormatUint(e.code, 16) + ")"
}

func streamError(code uint64, reason string) *h3Error { return &h3Error{code: code, reason: reason} }
func connError(code uint64, reason string) *h3Error {
	return &h3Error{code: code, conn: true, reason: reason}
}

// errH3HeadersTooLarge: the request's header section is over the limit;
// it is answered 431, as quic-go's http3 server does.
var errH3HeadersTooLarge = errors.New("http3: request header fields too large")

// h3Reading is what a request stream's reader keeps between requests:
// the header block's buffer and the limit it is read under.
type h3Reading struct {
	block   []byte
	maxList int // the header section's size limit, in RFC 9114's count
	qd      qpackDecoder
	host    string // the last :authority, kept for the next request
}

// readFrameHeader reads a frame's type and length.
func readFrameHeader(r *bufio.Reader) (typ, length uint64, err error) {
	if typ, err = quicvarint.Read(r); err != nil {
		return 0, 0, err
	}
	if length, err = quicvarint.Read(r); err != nil {
		return 0, 0, noEOF(err)
	}
	return typ, length, nil
}

// noEOF: a frame cut short is unexpected.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// discard skips n bytes of a frame the server does not read.
func discard(r *bufio.Reader, n uint64) error {
	for n > 0 {
		k, err := r.Discard(int(min(n, 1<<20)))
		n -= uint64(k)
		if err != nil {
			return noEOF(err)
		}
	}
	return nil
}

// reservedH2Frame: the HTTP/2 frame types HTTP/3 reserves (RFC 9114
// section 7.2.8) are a connection error wherever they come.
func reservedH2Frame(typ uint64) bool {
	return typ == 0x2 || typ == 0x6 || typ == 0x8 || typ == 0x9
}

// readRequest reads one request from a request stream into c.req: the
// HEADERS frame, then (for any method but GET, which carries no body)
// the DATA frames to the stream's end, at most MaxMessageSize+1 bytes of
// them kept, and trailers read and dropped. A Content-Length over
// MaxMessageSize, or a body past it, ends the reading early: the core
// answers 413. Unknown frame types are skipped (section 9). It returns
// errH3HeadersTooLarge, an *h3Error, or the stream's read error.
func (rd *h3Reading) readRequest(r *bufio.Reader, c *call) error {
	for {
		typ, n, err := readFrameHeader(r)
		if err != nil {
			if err == io.EOF {
				return streamError(h3RequestIncomplete, "stream ended before HEADERS")
			}
			return err
		}
		switch {
		case typ == h3FrameHeaders:
			if n > uint64(rd.maxList) {
				return errH3HeadersTooLarge
			}
			if err := rd.readHeaders(r, int(n), c); err != nil {
				return err
			}
			if c.req.Method == methodGet || c.req.ContentLength > MaxMessageSize {
				return nil
			}
			return rd.readBody(r, c)
		case typ == h3FrameData || !unknownFrame(typ):
			return connError(h3FrameUnexpected, "frame of type 0x"+strconv.FormatUint(typ, 16)+" before HEADERS")
		default:
			if err := discard(r, n); err != nil {
				return err
			}
		}
	}
}

// unknownFrame: a frame type the request stream skips (section 9):
// neither one HTTP/3 defines nor one it reserves.
func unknownFrame(typ uint64) bool {
	switch typ {
	case h3FrameData, h3FrameHeaders, h3FrameCancelPush, h3FrameSettings, h3FramePushPromise, h3FrameGoAway, h3FrameMaxPushID:
		return false
	}
	return !reservedH2Frame(typ)
}

// readHeaders reads a HEADERS frame's n-byte field section and decodes it
// into c.req.
func (rd *h3Reading) readHeaders(r *bufio.Reader, n int, c *call) error {
	if cap(rd.block) < n {
		rd.block = make([]byte, n)
	}
	rd.block = rd.block[:n]
	if _, err := io.ReadFull(r, rd.block); err != nil {
		return noEOF(err)
	}
	return rd.decodeRequest(rd.block, &c.req)
}

// readBody reads DATA frames to the end of the stream into c.req.Body,
// checking Content-Length (RFC 9114 section 4.1.2).
func (rd *h3Reading) readBody(r *bufio.Reader, c *call) error {
	req := &c.req
	var got int64
	trailers := false
	for {
		typ, n, err := readFrameHeader(r)
		if err == io.EOF {
			if req.ContentLength >= 0 && got != req.ContentLength {
				return streamError(h3MessageError, "body shorter than its content-length")
			}
			return nil
		}
		if err != nil {
			return err
		}
		switch {
		case typ == h3FrameData && !trailers:
			got += int64(n)
			if req.ContentLength >= 0 && got > req.ContentLength {
				return streamError(h3MessageError, "body longer than its content-length")
			}
			keep := min(n, uint64(max(0, MaxMessageSize+1-len(req.Body))))
			start := len(req.Body)
			req.Body = append(req.Body, make([]byte, keep)...)
			if _, err := io.ReadFull(r, req.Body[start:]); err != nil {
				return noEOF(err)
			}
			if len(req.Body) > MaxMessageSize {
				return nil // 413 at once: the rest is not read
			}
			if err := discard(r, n-keep); err != nil {
				return err
			}
		case typ == h3FrameHeaders && !trailers:
			// Trailers: checked, and dropped.
			trailers = true
			if n > uint64(rd.maxList) {
				return errH3HeadersTooLarge
			}
			if cap(rd.block) < int(n) {
				rd.block = make([]byte, n)
			}
			rd.block = rd.block[:n]
			if _, err := io.ReadFull(r, rd.block); err != nil {
				return noEOF(err)
			}
			if err := rd.checkTrailers(rd.block); err != nil {
				return err
			}
		case unknownFrame(typ):
			if err := discard(r, n); err != nil {
				return err
			}
		default:
			return connError(h3FrameUnexpected, "frame of type 0x"+strconv.FormatUint(typ, 16)+" in a request body")
		}
	}
}

// decodeH3Request decodes a request's QPACK field section into req, with
// RFC 9114 section 4.3's rules (the HTTP/2 server's, RFC 9113 section
// 8.3): pseudo-header fields first, once each, :method, :scheme and :path
// present (and :path not empty), names in lower case, no
// connection-specific fields, one Content-Length. A section over maxList
// (names, values and 32 bytes a field) is errH3HeadersTooLarge.
func (rd *h3Reading) decodeRequest(block []byte, req *Request) error {
	size := 0
	var pseudo uint8
	regular := false
	req.ContentLength = -1
	err := rd.qd.decode(block, func(name, value string) error {
		if size += len(name) + len(value) + 32; size > rd.maxList {
			return errH3HeadersTooLarge
		}
		if len(name) > 0 && name[0] == ':' {
			if regular {
				return streamError(h3MessageError, "pseudo-header field after regular fields")
			}
			var bit uint8
			switch name {
			case ":method":
				bit, req.Method = pseudoMethod, internMethod(value)
			case ":scheme":
				bit = pseudoScheme
			case ":path":
				bit = pseudoPath
				if value == "" {
					return streamError(h3MessageError, "empty :path")
				}
				req.Path, req.RawQuery, _ = cutQuery(value)
			case ":authority":
				bit = pseudoAuthority
				if value != rd.host { // a client names the same host on every request
					rd.host = value
				}
				req.Host = rd.host
			default:
				return streamError(h3MessageError, "unknown pseudo-header field "+name)
			}
			if pseudo&bit != 0 {
				return streamError(h3MessageError, "duplicate "+name)
			}
			pseudo |= bit
			return nil
		}
		regular = true
		if err := checkRegularField(name, value); err != "" {
			return streamError(h3MessageError, err)
		}
		if name == "content-length" {
			n, err := strconv.ParseUint(value, 10, 63)
			if err != nil || req.ContentLength >= 0 && int64(n) != req.ContentLength {
				return streamError(h3MessageError, "bad content-length")
			}
			req.ContentLength = int64(n)
		}
		if name == "host" && req.Host == "" {
			req.Host = value
		}
		req.Header = append(req.Header, HeaderField{name, value})
		return nil
	})
	if err != nil {
		return qpackFailed(err)
	}
	if pseudo&(pseudoMethod|pseudoScheme|pseudoPath) != pseudoMethod|pseudoScheme|pseudoPath {
		return streamError(h3MessageError, "missing pseudo-header field")
	}
	return nil
}

// qpackFailed is the error for a field section that did not decode:
// the rules' own, or QPACK_DECOMPRESSION_FAILED.
func qpackFailed(err error) error {
	if _, ok := err.(*h3Error); ok || err == nil || err == errH3HeadersTooLarge {
		return err
	}
	return streamError(h3QPACKDecompressionFailed, err.Error())
}

// checkTrailers checks a trailer section, whose fields are dropped.
func (rd *h3Reading) checkTrailers(block []byte) error {
	size := 0
	return qpackFailed(rd.qd.decode(block, func(name, value string) error {
		if size += len(name) + len(value) + 32; size > rd.maxList {
			return errH3HeadersTooLarge
		}
		if strings.HasPrefix(name, ":") {
			return streamError(h3MessageError, "pseudo-header field in trailers")
		}
		if err := checkRegularField(name, value); err != "" {
			return streamError(h3MessageError, err)
		}
		return nil
	}))
}

// checkRegularField is the rule for a regular field of a request (RFC
// 9114 section 4.2, as RFC 9113 section 8.2 for HTTP/2): a lower-case
// token name, a valid value, nothing connection-specific, TE only as
// "trailers". It returns the problem, or "".
func checkRegularField(name, value string) string {
	if !validFieldName(name) || !httpguts.ValidHeaderFieldValue(value) {
		return "invalid header field"
	}
	switch name {
	case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
		return "connection-specific header field " + name
	case "te":
		if value != "trailers" {
			return "te other than trailers"
		}
	}
	return ""
}

// internMethod is the request's method: a constant for the usual two.
func internMethod(m string) string {
	switch m {
	case methodGet:
		return methodGet
	case methodPost:
		return methodPost
	}
	return m
}

// appendH3Frame appends a frame of type typ around payload.
func appendH3Frame(b []byte, typ uint64, payload []byte) []byte {
	b = quicvarint.Append(b, typ)
	b = quicvarint.Append(b, uint64(len(payload)))
	return append(b, payload...)
}

// appendH3Settings appends the server's control stream opening: its type
// and a SETTINGS frame that announces the header section limit. QPACK's
// dynamic table stays off (its capacity and blocked streams default to
// 0), so no field section refers to state outside it.
func appendH3Settings(b []byte, maxList int) []byte {
	b = quicvarint.Append(b, h3StreamControl)
	var s []byte
	s = quicvarint.Append(s, h3SettingMaxFieldSectionSize)
	s = quicvarint.Append(s, uint64(maxList))
	return appendH3Frame(b, h3FrameSettings, s)
}

// appendH3GoAway appends a GOAWAY frame: requests on streams from id on
// are not served (RFC 9114 section 5.2).
func appendH3GoAway(b []byte, id uint64) []byte {
	return appendH3Frame(b, h3FrameGoAway, quicvarint.Append(nil, id))
}

// h3Response encodes responses: a HEADERS frame and a DATA frame, in
// one buffer.
type h3Response struct {
	fields []byte
	out    []byte
}

func newH3Response() *h3Response { return &h3Response{} }

// encode returns the frames of a response with status, the date, header
// fields hdr and body (no DATA frame when body is empty). The result is
// r's until the next encode.
func (r *h3Response) encode(status int, date string, hdr Header, body []byte) []byte {
	f := appendQPACKPrefix(r.fields[:0])
	f = appendQPACKStatus(f, status)
	f = appendQPACKField(f, "date", date)
	for _, h := range hdr {
		f = appendQPACKField(f, h.Name, h.Value)
	}
	r.fields = f
	b := appendH3Frame(r.out[:0], h3FrameHeaders, f)
	if len(body) > 0 {
		b = quicvarint.Append(b, h3FrameData)
		b = quicvarint.Append(b, uint64(len(body)))
		b = append(b, body...)
	}
	r.out = b
	return b
}
