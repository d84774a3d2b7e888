package doh

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/miekg/dns"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// immediateResolver answers every question at once with a fixed reply, as
// a cache hit: the HTTP/2 server answers on the connection's goroutine.
type immediateResolver struct{ fixedResolver }

func (r immediateResolver) ResolveImmediate(q *dns.Msg) (engine.Response, bool) {
	return engine.Response{Msg: r.reply, Result: engine.ResultLocal, CacheHit: true}, true
}

var _ ImmediateResolver = immediateResolver{}

// memConn is a connection that reads prepared bytes and throws away what
// is written, so a benchmark measures the server alone.
type memConn struct {
	r       io.Reader
	written int
}

func (m *memConn) Read(b []byte) (int, error)         { return m.r.Read(b) }
func (m *memConn) Write(b []byte) (int, error)        { m.written += len(b); return len(b), nil }
func (m *memConn) Close() error                       { return nil }
func (m *memConn) LocalAddr() net.Addr                { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 443} }
func (m *memConn) RemoteAddr() net.Addr               { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000} }
func (m *memConn) SetDeadline(t time.Time) error      { return nil }
func (m *memConn) SetReadDeadline(t time.Time) error  { return nil }
func (m *memConn) SetWriteDeadline(t time.Time) error { return nil }

// clientFrames is what a browser-like client sends: the preface, its
// SETTINGS, then n GET requests for the same name, ten to a write, its
// header blocks indexed by HPACK after the first.
func clientFrames(b testing.TB, path string, n int) []byte {
	var out, blk bytes.Buffer
	fr := http2.NewFramer(&out, nil)
	enc := hpack.NewEncoder(&blk)
	out.WriteString(http2.ClientPreface)
	fr.WriteSettings()
	fr.WriteWindowUpdate(0, 1<<30)
	for i := range n {
		blk.Reset()
		for _, f := range []hpack.HeaderField{
			{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "https"},
			{Name: ":authority", Value: "dns.example"}, {Name: ":path", Value: path},
			{Name: "accept", Value: MediaTypeDNS},
		} {
			enc.WriteField(f)
		}
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: blk.Bytes(), EndStream: true, EndHeaders: true})
	}
	return out.Bytes()
}

// BenchmarkH2CacheHit is one RFC 8484 GET answered at once (a cache hit)
// through the HTTP/2 server, from the frame read to the frames written:
// HPACK decoding, the DoH core, packing the reply, HPACK encoding and
// framing. Allocations per op are per request.
func BenchmarkH2CacheHit(b *testing.B) {
	h, target := benchHandler(b)
	core := NewHandler(immediateResolver{fixedResolver{h.(*Handler).resolver.(fixedResolver).reply}}, Options{})
	srv, err := newServer(core, nil, Limits{})
	if err != nil {
		b.Fatal(err)
	}
	frames := clientFrames(b, target, b.N+1)
	mc := &memConn{r: bytes.NewReader(frames)}
	c := newH2Conn(srv, mc, bufio.NewReaderSize(mc, readBufferSize))
	b.ReportAllocs()
	b.ResetTimer()
	c.serve()
	b.StopTimer()
	if mc.written < b.N*50 {
		b.Fatalf("wrote %d bytes for %d requests", mc.written, b.N)
	}
}
