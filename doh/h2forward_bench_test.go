//go:build !wasip1

package doh

import (
	"bufio"
	"bytes"
	"io"
	"net/netip"
	"testing"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
	"github.com/miekg/dns"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// lockstepConn plays a client that sends one request and waits for its
// answer before the next, like h2load with one stream: Read hands out the
// next request only after Write has carried a DATA frame that ends a
// stream. Its own work allocates nothing, so a benchmark's allocations
// are the server's and the engine's.
type lockstepConn struct {
	memConn
	requests [][]byte // requests[0] is the preface and SETTINGS
	next     int
	pending  []byte
	answered chan struct{}
	answers  int
}

func (c *lockstepConn) Read(b []byte) (int, error) {
	if len(c.pending) == 0 {
		if c.next == len(c.requests) {
			<-c.answered
			return 0, io.EOF
		}
		if c.next > 1 {
			<-c.answered
		}
		c.pending = c.requests[c.next]
		c.next++
	}
	n := copy(b, c.pending)
	c.pending = c.pending[n:]
	return n, nil
}

// Write reads the frame headers of what the server writes (it writes
// whole frames) and counts streams ended by DATA.
func (c *lockstepConn) Write(b []byte) (int, error) {
	for p := b; len(p) >= 9; {
		length := int(p[0])<<16 | int(p[1])<<8 | int(p[2])
		if http2.FrameType(p[3]) == http2.FrameData && http2.Flags(p[4]).Has(http2.FlagDataEndStream) {
			c.answers++
			c.answered <- struct{}{}
		}
		p = p[min(len(p), 9+length):]
	}
	return len(b), nil
}

// forwardRequests is the preface and n GETs for distinct names, one
// request a chunk, header blocks indexed by HPACK as a browser's are.
func forwardRequests(b testing.TB, n int) [][]byte {
	var out, blk bytes.Buffer
	fr := http2.NewFramer(&out, nil)
	enc := hpack.NewEncoder(&blk)
	writeClientStart(&out, fr)
	requests := [][]byte{bytes.Clone(out.Bytes())}
	for i := range n {
		out.Reset()
		blk.Reset()
		q := new(dns.Msg)
		q.SetQuestion(dns.Fqdn(itoa(i)+".www.example.test"), dns.TypeA)
		q.Id = 0
		wire, err := q.Pack()
		if err != nil {
			b.Fatal(err)
		}
		for _, f := range []hpack.HeaderField{
			{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "https"},
			{Name: ":authority", Value: "dns.example"}, {Name: ":path", Value: DefaultPath + "?dns=" + b64(wire)},
			{Name: "accept", Value: MediaTypeDNS},
		} {
			enc.WriteField(f)
		}
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: blk.Bytes(), EndStream: true, EndHeaders: true})
		requests = append(requests, bytes.Clone(out.Bytes()))
	}
	return requests
}

// BenchmarkH2Forward is one forwarded question per op, from the HTTP/2
// frame read to the frames written: the server, the DoH core and the
// engine with its cache off, over a pooled UDP socket to nsd (a separate
// process, so its allocations are not counted). One request at a time;
// distinct names. Allocations per op are per forwarded question end to
// end (the target is 10 or fewer). Figures only: nothing is asserted.
func BenchmarkH2Forward(b *testing.B) { benchH2Forward(b, Options{}) }

// BenchmarkH2ForwardOperator is BenchmarkH2Forward with the handler as
// dohfwd sets it up: trace context and Server-Timing on, an Admit that
// lets every question through (the engine then sees the client through
// engine.WithClient), and an observer.
func BenchmarkH2ForwardOperator(b *testing.B) {
	benchH2Forward(b, Options{TraceContext: true, ServerTiming: true,
		Admit:   func(netip.Addr) (bool, time.Duration) { return true, 0 },
		Observe: func(Exchange) {}})
}

func benchH2Forward(b *testing.B, o Options) {
	addr := upstreamtest.StartNSD(b, upstreamtest.Zone{Origin: "example.test.", Text: `$ORIGIN example.test.
$TTL 300
@    3600 IN SOA ns admin 1 3600 600 86400 120
@    IN NS ns
ns   IN A 127.0.0.1
*.www IN A 192.0.2.80
`})
	e, err := engine.New(engine.Config{FallbackServers: []string{addr}}, engine.Options{Network: engine.NativeNetwork{}})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	srv, err := newServer(NewHandler(e, o), nil, Limits{})
	if err != nil {
		b.Fatal(err)
	}
	// Fill the socket pool first (it reuses sockets only once 256 are
	// idle), so the figures are the steady state.
	const warm = 400
	run := func(n int) int {
		mc := &lockstepConn{requests: forwardRequests(b, n), answered: make(chan struct{}, 1)}
		c := newH2Conn(srv, mc, bufio.NewReaderSize(mc, readBufferSize))
		c.serve()
		return mc.answers
	}
	run(warm)
	requests := forwardRequests(b, b.N)
	mc := &lockstepConn{requests: requests, answered: make(chan struct{}, 1)}
	c := newH2Conn(srv, mc, bufio.NewReaderSize(mc, readBufferSize))
	b.ReportAllocs()
	b.ResetTimer()
	c.serve()
	b.StopTimer()
	if mc.answers != b.N {
		b.Fatalf("%d answers to %d requests", mc.answers, b.N)
	}
	b.ReportMetric(float64(e.IdleSockets()), "pooled-sockets")
}
