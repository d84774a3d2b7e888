//go:build !wasip1

package doh

import (
	"bufio"
	"bytes"
	"net"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// BenchmarkH2Servers serves the same DoH handler, answering every GET at
// once (a cache hit), through this package's HTTP/2 server and through
// golang.org/x/net/http2's Server, on real loopback TCP: one connection,
// requests in windows of 50 streams, as a browser sends them. It is the
// figure behind the package doc's design note; the client (a bare
// Framer) is the same for both, so the difference is the servers'.
//
//	go test -run '^$' -bench BenchmarkH2Servers -benchtime 20000x ./doh
func BenchmarkH2Servers(b *testing.B) {
	h, target := benchHandler(b)
	wire := h.(*Handler).resolver.(fixedResolver).reply
	core := NewHandler(immediateResolver{fixedResolver{wire}, wire}, Options{})
	b.Run("ours", func(b *testing.B) {
		srv, err := newServer(core, nil, Limits{})
		if err != nil {
			b.Fatal(err)
		}
		benchH2Server(b, target, func(nc net.Conn) {
			newH2Conn(srv, nc, bufio.NewReaderSize(nc, readBufferSize)).serve()
		})
	})
	b.Run("xnet", func(b *testing.B) {
		srv := &http2.Server{MaxConcurrentStreams: 250}
		benchH2Server(b, target, func(nc net.Conn) {
			srv.ServeConn(nc, &http2.ServeConnOpts{Handler: core})
		})
	})
}

// benchH2Server runs b.N GETs of target over one loopback connection
// served by serve, 50 streams at a time, and waits for every answer.
func benchH2Server(b *testing.B, target string, serve func(net.Conn)) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		serve(nc)
		nc.Close()
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	bw := bufio.NewWriterSize(nc, 64<<10)
	fr := http2.NewFramer(bw, bufio.NewReaderSize(nc, 64<<10))
	bw.WriteString(http2.ClientPreface)
	fr.WriteSettings()
	fr.WriteWindowUpdate(0, 1<<30)
	bw.Flush()

	var blk bytes.Buffer
	enc := hpack.NewEncoder(&blk)
	const window = 50
	b.ReportAllocs()
	b.ResetTimer()
	id := uint32(1)
	for sent := 0; sent < b.N; {
		n := min(window, b.N-sent)
		for range n {
			blk.Reset()
			for _, f := range []hpack.HeaderField{
				{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "https"},
				{Name: ":authority", Value: "dns.example"}, {Name: ":path", Value: target},
				{Name: "accept", Value: MediaTypeDNS},
			} {
				enc.WriteField(f)
			}
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: blk.Bytes(), EndStream: true, EndHeaders: true})
			id += 2
		}
		if err := bw.Flush(); err != nil {
			b.Fatal(err)
		}
		var data uint32
		for done := 0; done < n; {
			f, err := fr.ReadFrame()
			if err != nil {
				b.Fatalf("after %d answers: %v", sent+done, err)
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					fr.WriteSettingsAck()
				}
			case *http2.DataFrame:
				data += uint32(len(f.Data()))
				if f.StreamEnded() {
					done++
				}
			case *http2.HeadersFrame:
				if f.StreamEnded() {
					done++
				}
			case *http2.RSTStreamFrame:
				b.Fatalf("stream %d reset: %v", f.StreamID, f.ErrCode)
			case *http2.GoAwayFrame:
				b.Fatalf("GOAWAY %v", f.ErrCode)
			}
		}
		// Give back what the answers took of the connection's window.
		if data > 0 {
			fr.WriteWindowUpdate(0, data)
		}
		sent += n
	}
	b.StopTimer()
}
