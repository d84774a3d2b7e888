//go:build !wasip1

package doh

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/quic-go/qpack"
	"github.com/quic-go/quic-go/quicvarint"
)

// h3Fields is a QPACK field section of fields, name then value.
func h3Fields(fields ...string) []byte {
	var b bytes.Buffer
	enc := qpack.NewEncoder(&b)
	for i := 0; i+1 < len(fields); i += 2 {
		enc.WriteField(qpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	enc.Close()
	return b.Bytes()
}

// h3Get is a request stream's bytes for a GET of path.
func h3Get(path string, more ...string) []byte {
	return appendH3Frame(nil, h3FrameHeaders, h3Fields(append([]string{":method", "GET", ":scheme", "https",
		":authority", "127.0.0.1", ":path", path}, more...)...))
}

// h3Post is a request stream's bytes for a POST of body in DATA frames
// of at most chunk bytes.
func h3Post(body []byte, chunk int, more ...string) []byte {
	b := appendH3Frame(nil, h3FrameHeaders, h3Fields(append([]string{":method", "POST", ":scheme", "https",
		":authority", "127.0.0.1", ":path", "/dns-query", "content-type", MediaTypeDNS}, more...)...))
	for len(body) > 0 {
		n := min(chunk, len(body))
		b = appendH3Frame(b, h3FrameData, body[:n])
		body = body[n:]
	}
	return b
}

func readH3(stream []byte) (*call, error) {
	rd := h3Reading{maxList: maxHeaderList(DefaultLimits())}
	c := &call{}
	err := rd.readRequest(bufio.NewReader(bytes.NewReader(stream)), c)
	return c, err
}

// The request stream's rules (RFC 9114 sections 4 and 7), one case
// each: what is read into the Request, and which error code a stream
// that breaks them gets (a connection error where the RFC says so).
func TestH3ReadRequest(t *testing.T) {
	query := []byte("\x00\x00\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x03www\x07example\x04test\x00\x00\x01\x00\x01")
	unknown := appendH3Frame(nil, 0x21, []byte("grease")) // reserved types 0x1f*N+0x21 are skipped
	for _, tc := range []struct {
		name   string
		stream []byte
		code   uint64 // 0: read; errH3HeadersTooLarge: 1
		conn   bool
		check  func(*Request) bool
	}{
		{name: "GET", stream: h3Get("/dns-query?dns=AAAB", "accept", MediaTypeDNS), check: func(r *Request) bool {
			return r.Method == "GET" && r.Path == "/dns-query" && r.RawQuery == "dns=AAAB" && r.Host == "127.0.0.1" &&
				r.Header.Get("accept") == MediaTypeDNS && r.ContentLength == -1
		}},
		{name: "POST in pieces", stream: h3Post(query, 5), check: func(r *Request) bool {
			return r.Method == "POST" && bytes.Equal(r.Body, query)
		}},
		{name: "unknown frames skipped", stream: append(append(unknown, h3Post(query, 7)...), unknown...), check: func(r *Request) bool {
			return bytes.Equal(r.Body, query)
		}},
		{name: "content-length kept", stream: h3Post(query, 100, "content-length", itoa(len(query))), check: func(r *Request) bool {
			return r.ContentLength == int64(len(query)) && bytes.Equal(r.Body, query)
		}},
		{name: "trailers dropped", stream: appendH3Frame(h3Post(query, 100), h3FrameHeaders, h3Fields("x-t", "1")), check: func(r *Request) bool {
			return bytes.Equal(r.Body, query) && r.Header.Get("x-t") == ""
		}},
		{name: "body past the limit: read stops", stream: h3Post(make([]byte, MaxMessageSize+100), 20000), check: func(r *Request) bool {
			return len(r.Body) == MaxMessageSize+1
		}},
		{name: "content-length past the limit: body not read", stream: h3Post(make([]byte, 10), 10, "content-length", "70000"), check: func(r *Request) bool {
			return r.ContentLength == 70000 && len(r.Body) == 0
		}},
		{name: "body longer than content-length", stream: h3Post(query, 100, "content-length", "3"), code: h3MessageError},
		{name: "body shorter than content-length", stream: h3Post(query, 100, "content-length", "300"), code: h3MessageError},
		{name: "two content-lengths", stream: h3Post(query, 100, "content-length", "1", "content-length", "2"), code: h3MessageError},
		{name: "DATA first", stream: append(appendH3Frame(nil, h3FrameData, query), h3Get("/")...), code: h3FrameUnexpected, conn: true},
		{name: "SETTINGS on a request stream", stream: appendH3Frame(nil, h3FrameSettings, nil), code: h3FrameUnexpected, conn: true},
		{name: "HTTP/2's PRIORITY type", stream: appendH3Frame(nil, 0x2, nil), code: h3FrameUnexpected, conn: true},
		{name: "GOAWAY in a body", stream: appendH3Frame(h3Post(query, 100), h3FrameGoAway, []byte{0}), code: h3FrameUnexpected, conn: true},
		{name: "DATA after trailers", stream: appendH3Frame(appendH3Frame(h3Post(query, 100), h3FrameHeaders, h3Fields("x-t", "1")), h3FrameData, query), code: h3FrameUnexpected, conn: true},
		{name: "no HEADERS", stream: unknown, code: h3RequestIncomplete},
		{name: "no :path", stream: appendH3Frame(nil, h3FrameHeaders, h3Fields(":method", "GET", ":scheme", "https")), code: h3MessageError},
		{name: "empty :path", stream: h3Get(""), code: h3MessageError},
		{name: "duplicate :method", stream: h3Get("/", ":method", "GET"), code: h3MessageError},
		{name: "pseudo after regular", stream: appendH3Frame(nil, h3FrameHeaders, h3Fields("accept", "x", ":method", "GET", ":scheme", "https", ":path", "/")), code: h3MessageError},
		{name: "unknown pseudo", stream: h3Get("/", ":protocol", "websocket"), code: h3MessageError},
		{name: "upper case name", stream: h3Get("/", "Accept", "x"), code: h3MessageError},
		{name: "connection header", stream: h3Get("/", "connection", "close"), code: h3MessageError},
		{name: "te other than trailers", stream: h3Get("/", "te", "gzip"), code: h3MessageError},
		{name: "pseudo in trailers", stream: appendH3Frame(h3Post(query, 100), h3FrameHeaders, h3Fields(":path", "/")), code: h3MessageError},
		{name: "dynamic table reference", stream: appendH3Frame(nil, h3FrameHeaders, []byte{0, 0, 0x80}), code: h3QPACKDecompressionFailed},
		{name: "headers over the limit", stream: h3Get("/", "x-big", string(make([]byte, 20000))), code: 1},
		{name: "HEADERS frame over the limit", stream: appendH3Frame(nil, h3FrameHeaders, make([]byte, 20000)), code: 1},
	} {
		c, err := readH3(tc.stream)
		switch {
		case tc.code == 0 && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.code == 0 && !tc.check(&c.req):
			t.Errorf("%s: read %+v", tc.name, c.req)
		case tc.code == 1 && err != errH3HeadersTooLarge:
			t.Errorf("%s: %v, want errH3HeadersTooLarge", tc.name, err)
		case tc.code > 1:
			he, ok := errors.AsType[*h3Error](err)
			if !ok || he.code != tc.code || he.conn != tc.conn {
				t.Errorf("%s: %v, want code %#x (connection %v)", tc.name, err, tc.code, tc.conn)
			}
		}
	}
}

// The client's control stream: SETTINGS first and once, no reserved
// settings, no frames of request streams, and it must not end.
func TestH3ReadControl(t *testing.T) {
	settings := func(kv ...uint64) []byte {
		var p []byte
		for _, v := range kv {
			p = quicvarint.Append(p, v)
		}
		return appendH3Frame(nil, h3FrameSettings, p)
	}
	for _, tc := range []struct {
		name   string
		stream []byte
		code   uint64
	}{
		{"ends after SETTINGS and GOAWAY", append(settings(6, 100, 0x21, 1), appendH3Frame(nil, h3FrameGoAway, []byte{0})...), h3ClosedCriticalStream},
		{"no SETTINGS first", appendH3Frame(nil, h3FrameGoAway, []byte{0}), h3MissingSettings},
		{"SETTINGS twice", append(settings(), settings()...), h3FrameUnexpected},
		{"duplicate setting", settings(6, 1, 6, 2), h3SettingsError},
		{"HTTP/2's setting", settings(0x4, 1), h3SettingsError},
		{"DATA", appendH3Frame(settings(), h3FrameData, nil), h3FrameUnexpected},
		{"HEADERS", appendH3Frame(settings(), h3FrameHeaders, nil), h3FrameUnexpected},
		{"malformed SETTINGS", appendH3Frame(nil, h3FrameSettings, []byte{0x40}), h3FrameError},
	} {
		e := readControl(bufio.NewReader(bytes.NewReader(tc.stream)))
		if e == nil || e.code != tc.code {
			t.Errorf("%s: %v, want code %#x", tc.name, e, tc.code)
		}
	}
}

// FuzzH3Request: any bytes on a request stream are read without a
// panic into a request that keeps the rules it was read by, or refused
// with an error; a section quic-go's QPACK decoder reads whole is read
// the same.
func FuzzH3Request(f *testing.F) {
	query := []byte("\x00\x00\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x03www\x07example\x04test\x00\x00\x01\x00\x01")
	f.Add(h3Get("/dns-query?dns=AAABAAABAAAAAAAAA3d3dwdleGFtcGxlBHRlc3QAAAEAAQ", "accept", MediaTypeDNS))
	f.Add(h3Post(query, 7, "content-length", itoa(len(query))))
	f.Add(appendH3Frame(h3Post(query, 100), h3FrameHeaders, h3Fields("x-t", "1")))
	f.Add(append(appendH3Frame(nil, 0x21, []byte("x")), h3Get("/resolve?name=a")...))
	f.Fuzz(func(t *testing.T, stream []byte) {
		c, err := readH3(stream)
		if err != nil {
			if _, ok := errors.AsType[*h3Error](err); !ok && err != errH3HeadersTooLarge &&
				!errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
				t.Fatalf("error %v (%T)", err, err)
			}
			return
		}
		r := &c.req
		if r.Method == "" || r.Path == "" {
			t.Fatalf("read without :method or :path: %+v", r)
		}
		if len(r.Body) > MaxMessageSize+1 {
			t.Fatalf("body of %d bytes kept", len(r.Body))
		}
		if r.Method == methodGet && len(r.Body) > 0 {
			t.Fatalf("a GET's body read")
		}
		for _, h := range r.Header {
			if checkRegularField(h.Name, h.Value) != "" {
				t.Fatalf("field %q: %q kept", h.Name, h.Value)
			}
		}
	})
}

// FuzzH3Fields: a field section is decoded as quic-go's QPACK decoder
// (quic-go/qpack) reads it: both refuse it, or each field it yields is
// kept, in order, unless the request rules refuse the section.
func FuzzH3Fields(f *testing.F) {
	f.Add(h3Fields(":method", "GET", ":scheme", "https", ":path", "/dns-query?dns=AAAB", "accept", MediaTypeDNS))
	f.Add(h3Fields(":method", "POST", ":scheme", "https", ":path", "/dns-query", "content-length", "33", "x-a", "b"))
	f.Fuzz(func(t *testing.T, block []byte) {
		var req Request
		rd := h3Reading{maxList: 1 << 14}
		err := rd.decodeRequest(block, &req)
		next := qpack.NewDecoder().Decode(block)
		var regular []HeaderField
		for {
			hf, qerr := next()
			if qerr == io.EOF {
				break
			}
			if qerr != nil {
				if he, ok := errors.AsType[*h3Error](err); err == nil || ok && he.code != h3QPACKDecompressionFailed && he.code != h3MessageError {
					t.Fatalf("qpack refuses (%v), ours: %v, %+v", qerr, err, req)
				}
				return
			}
			if !hf.IsPseudo() {
				regular = append(regular, HeaderField{hf.Name, hf.Value})
			}
		}
		if he, ok := errors.AsType[*h3Error](err); ok && he.code == h3QPACKDecompressionFailed {
			t.Fatalf("qpack decodes %q, ours refuses: %v", regular, err)
		}
		if err != nil {
			return
		}
		if len(regular) != len(req.Header) {
			t.Fatalf("fields %q, kept %q", regular, req.Header)
		}
		for i := range regular {
			if regular[i] != req.Header[i] {
				t.Fatalf("fields %q, kept %q", regular, req.Header)
			}
		}
	})
}

// The static table is RFC 9204's, as quic-go/qpack has it: each index,
// encoded as an indexed field line, decodes there to the same field.
func TestQPACKStaticTable(t *testing.T) {
	for i, e := range qpackStatic {
		block := appendHpackInt([]byte{0, 0}, 0xc0, 6, uint64(i))
		f, err := qpack.NewDecoder().Decode(block)()
		if err != nil || f.Name != e.name || f.Value != e.value {
			t.Errorf("index %d: ours %q: %q, qpack %q: %q (%v)", i, e.name, e.value, f.Name, f.Value, err)
		}
	}
	if _, err := qpack.NewDecoder().Decode(appendHpackInt([]byte{0, 0}, 0xc0, 6, uint64(len(qpackStatic))))(); err == nil {
		t.Errorf("qpack's table has more than %d entries", len(qpackStatic))
	}
}

// A response's field section, as the encoder writes it (static entries,
// name references, literals), decodes through quic-go/qpack to the fields
// written, in order.
func TestQPACKEncodeResponse(t *testing.T) {
	hdr := Header{{"content-type", MediaTypeDNS}, {"content-length", "1234"}, {"cache-control", "max-age=300"},
		{"x-content-type-options", "nosniff"}, {"alt-svc", `h3=":443"; ma=86400`}, {"server-timing", "total;dur=0.1"},
		{"a-rather-long-custom-header-name", strings.Repeat("v", 300)}}
	for _, status := range []int{200, 404, 400, 431, 503} {
		r := newH3Response()
		frames := r.encode(status, "Mon, 07 Dec 2026 13:00:00 GMT", hdr, []byte("body"))
		br := bufio.NewReader(bytes.NewReader(frames))
		typ, n, err := readFrameHeader(br)
		if err != nil || typ != h3FrameHeaders {
			t.Fatalf("first frame %d, %v", typ, err)
		}
		block := make([]byte, n)
		io.ReadFull(br, block)
		next := qpack.NewDecoder().Decode(block)
		want := append(Header{{":status", itoa(status)}, {"date", "Mon, 07 Dec 2026 13:00:00 GMT"}}, hdr...)
		for i := 0; ; i++ {
			f, err := next()
			if err == io.EOF {
				if i != len(want) {
					t.Errorf("status %d: %d fields decoded, want %d", status, i, len(want))
				}
				break
			}
			if err != nil || i >= len(want) || f.Name != want[i].Name || f.Value != want[i].Value {
				t.Fatalf("status %d: field %d %q: %q (%v)", status, i, f.Name, f.Value, err)
			}
		}
		if typ, n, err := readFrameHeader(br); err != nil || typ != h3FrameData || n != 4 {
			t.Errorf("status %d: DATA frame %d of %d bytes, %v", status, typ, n, err)
		}
	}
}
