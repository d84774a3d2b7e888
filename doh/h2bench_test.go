//go:build !wasip1

package doh

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/miekg/dns"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// immediateResolver answers every question at once with a fixed reply in
// wire form, as a cache hit: the HTTP/2 server answers on the
// connection's goroutine.
type immediateResolver struct {
	fixedResolver
	wire []byte
}

func newImmediateResolver(reply *dns.Msg) immediateResolver {
	wire, err := reply.Pack()
	if err != nil {
		panic(err)
	}
	return immediateResolver{fixedResolver{wire}, wire}
}

func (r immediateResolver) Resolve(_ context.Context, query, dst []byte) engine.Response {
	resp, _ := r.AnswerNow(query, dst, nil, nil)
	resp.CacheHit = false
	return resp
}

// ResolveMiss is never asked: the resolver never misses.
func (r immediateResolver) ResolveMiss(context.Context, *engine.Miss, []byte) engine.Response {
	panic("immediateResolver never misses")
}

func (r immediateResolver) AnswerNow(query, dst []byte, _ *engine.Trace, _ *engine.Miss) (engine.Response, bool) {
	out := append(dst, r.wire...)
	copy(out[len(dst):], query[:2]) // the client's ID
	return engine.Response{Wire: out, Rcode: int(r.wire[3] & 0xF), TTL: 300, Cacheable: true,
		Result: engine.ResultLocal, CacheHit: true}, true
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
	writeClientStart(&out, fr)
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

// writeClientStart writes what a client sends before its requests: the
// preface, its SETTINGS and a large connection window.
func writeClientStart(out *bytes.Buffer, fr *http2.Framer) {
	out.WriteString(http2.ClientPreface)
	fr.WriteSettings()
	fr.WriteWindowUpdate(0, 1<<30)
}

// BenchmarkH2CacheHit is one RFC 8484 GET answered at once (a cache hit)
// through the HTTP/2 server, from the frame read to the frames written:
// HPACK decoding, the DoH core, packing the reply, HPACK encoding and
// framing. Allocations per op are per request.
func BenchmarkH2CacheHit(b *testing.B) {
	h, target := benchHandler(b)
	wire := h.(*Handler).resolver.(fixedResolver).reply
	core := NewHandler(immediateResolver{fixedResolver{wire}, wire}, Options{})
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

// countingConn is a memConn that counts its writes.
type countingConn struct {
	memConn
	writes int
}

func (c *countingConn) Write(b []byte) (int, error) { c.writes++; return c.memConn.Write(b) }

// resolveForbidden answers at once and fails the test if a question is
// ever handed to Resolve (which the server calls on a goroutine of its
// own).
type resolveForbidden struct {
	immediateResolver
	t *testing.T
}

func (r resolveForbidden) Resolve(ctx context.Context, query, dst []byte) engine.Response {
	r.t.Errorf("Resolve called: an answer the resolver had at once was handed off")
	return r.immediateResolver.Resolve(ctx, query, dst)
}

// TestCacheHitsAnsweredTogether: ten requests that arrive together and
// that the resolver answers at once (cache hits) are answered on the
// connection's goroutine, never through Resolve, and their responses
// leave in one write with the connection's SETTINGS ACK.
func TestCacheHitsAnsweredTogether(t *testing.T) {
	h, target := benchHandler(t)
	res := resolveForbidden{immediateResolver{h.(*Handler).resolver.(fixedResolver), h.(*Handler).resolver.(fixedResolver).reply}, t}
	srv, err := newServer(NewHandler(res, Options{}), nil, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	frames := clientFrames(t, target, 10)
	cc := &countingConn{memConn: memConn{r: bytes.NewReader(frames)}}
	c := newH2Conn(srv, cc, bufio.NewReaderSize(cc, readBufferSize))
	c.serve()
	// One write of the server's SETTINGS before the preface is read, one
	// for everything answering the client's first read.
	if cc.writes != 2 {
		t.Errorf("%d writes, want 2: the server's SETTINGS, then the ten responses together", cc.writes)
	}
	if cc.written < 10*50 {
		t.Errorf("%d bytes written for ten answers", cc.written)
	}
}
