package main

import (
	"bytes"
	"encoding/base64"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/dohfwd/dohfwd/engine/upstreamtest"
)

// Reset floods against the binary, frame by frame over h2c, as an
// attacker sends them.

// framerClient is a raw HTTP/2 client on the plaintext listener.
type framerClient struct {
	t   *testing.T
	nc  net.Conn
	fr  *http2.Framer
	out bytes.Buffer // frames not yet written
	enc *hpack.Encoder
	blk bytes.Buffer
}

func (d *dohfwd) dialFramer() *framerClient {
	d.t.Helper()
	nc, err := net.Dial("tcp", d.HTTP)
	if err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(func() { nc.Close() })
	c := &framerClient{t: d.t, nc: nc}
	c.fr = http2.NewFramer(&c.out, nc)
	c.fr.AllowIllegalWrites = true
	c.enc = hpack.NewEncoder(&c.blk)
	c.out.WriteString(http2.ClientPreface)
	c.fr.WriteSettings()
	c.flush()
	return c
}

// get writes a GET for name's A record on stream id, ending the stream.
func (c *framerClient) get(id uint32, name string) {
	wire, err := newQuery(name, dns.TypeA).Pack()
	if err != nil {
		c.t.Fatal(err)
	}
	c.blk.Reset()
	for _, f := range []hpack.HeaderField{
		{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "http"}, {Name: ":authority", Value: "localhost"},
		{Name: ":path", Value: "/dns-query?dns=" + base64.RawURLEncoding.EncodeToString(wire)},
	} {
		c.enc.WriteField(f)
	}
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.blk.Bytes(), EndStream: true, EndHeaders: true})
}

func (c *framerClient) flush() error {
	_, err := c.nc.Write(c.out.Bytes())
	c.out.Reset()
	return err
}

// drain reads and drops what the server sends until the connection ends;
// it returns the GOAWAY, if one came.
func (c *framerClient) drain() <-chan *http2.GoAwayFrame {
	ch := make(chan *http2.GoAwayFrame, 1)
	go func() {
		var ga *http2.GoAwayFrame
		for {
			f, err := c.fr.ReadFrame()
			if err != nil {
				ch <- ga
				return
			}
			if g, ok := f.(*http2.GoAwayFrame); ok {
				ga = g
			}
		}
	}()
	return ch
}

// goroutines is /status goroutines.
func (d *dohfwd) goroutines() int {
	d.t.Helper()
	return int(d.status()["goroutines"].(float64))
}

// resetYAML is a configuration with the plaintext listener on, its one
// scope on up.
func resetYAML(up *upstreamtest.Server) string {
	return strings.Replace(scopeYAML(up.String()), "listen:\n", "listen:\n  http: 127.0.0.1:0\n", 1)
}

// Five seconds after a rapid-reset flood (CVE-2023-44487: streams opened
// and reset, a hundred at a time) the process is back to the goroutines it
// had before, give or take ten. The questions are all of one name, so
// that all but one wait on a goroutine each for the engine's one
// upstream question; those goroutines, kept for the next questions, do
// not stay once none comes.
func TestRapidResetLeavesNoGoroutines(t *testing.T) {
	t.Parallel()
	up := upstreamtest.Start(t, upstreamtest.Delay(time.Second, upstreamtest.Answer("@ 60 IN A 192.0.2.8")))
	d := startDohfwd(t, resetYAML(up), newPKI(t))
	// The baseline: a question answered, the process at rest.
	c := d.dialFramer()
	ended := c.drain()
	c.get(1, "warm.reset.test")
	c.flush()
	time.Sleep(time.Second)
	base := d.goroutines()

	// Batches of streams, reset once their questions wait: all of one
	// name, so that the engine asks once and the others wait for it.
	const n, batch = 5000, 100
	for i := 0; i < n; i += batch {
		for j := range batch {
			c.get(uint32(2*(i+j)+3), "same.reset.test")
		}
		if err := c.flush(); err != nil {
			t.Fatalf("after %d resets: %v", i, err)
		}
		time.Sleep(20 * time.Millisecond)
		for j := range batch {
			c.fr.WriteRSTStream(uint32(2*(i+j)+3), http2.ErrCodeCancel)
		}
		if err := c.flush(); err != nil {
			t.Fatalf("after %d resets: %v", i, err)
		}
	}
	reached := len(up.Queries()) - 1
	peak := d.goroutines()
	c.nc.Close()
	<-ended
	time.Sleep(5 * time.Second)
	after := d.goroutines()
	t.Logf("goroutines: %d at rest, %d after the flood, %d five seconds later; %d of %d reset questions reached the upstream",
		base, peak, after, reached, n)
	if after > base+10 {
		t.Errorf("%d goroutines five seconds after the flood, want at most %d (baseline %d + 10)", after, base+10, base)
	}
}
