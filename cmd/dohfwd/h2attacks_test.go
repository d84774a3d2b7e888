package main

import (
	"bytes"
	"encoding/base64"
	"fmt"
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

// MadeYouReset (CVE-2025-8671) through the binary: of 100 questions
// waiting on a server that drops every query, 50 are reset by the client
// (RST_STREAM) and 50 by dohfwd itself, provoked by DATA on streams the
// client had ended. Both kinds stop their upstream work: no question
// makes a second attempt, none is charged to the server, each counts as
// cancelled, and the connection stays.
func TestServerResetStopsUpstreamWork(t *testing.T) {
	t.Parallel()
	hole := upstreamtest.Start(t, upstreamtest.Drop())
	d := startDohfwd(t, resetYAML(hole), newPKI(t))
	c := d.dialFramer()
	ended := c.drain()
	const n = 100
	for i := range n {
		c.get(uint32(2*i+1), fmt.Sprintf("m%d.reset.test", i))
	}
	c.flush()
	d.waitInFlight(n, 10*time.Second)
	for i := range n {
		id := uint32(2*i + 1)
		if i%2 == 0 {
			c.fr.WriteRSTStream(id, http2.ErrCodeCancel)
		} else {
			c.fr.WriteData(id, true, []byte{0}) // the stream is half closed (remote)
		}
	}
	c.flush()
	d.waitInFlight(0, 10*time.Second)
	time.Sleep(5 * time.Second) // past the second and third attempts' times
	reached := len(hole.Queries())
	st := d.status()
	counters := st["counters"].(map[string]any)
	t.Logf("%d of %d reset questions reached the upstream; counters %v", reached, n, counters)
	if reached != n {
		t.Errorf("the upstream saw %d queries, want the %d first attempts only", reached, n)
	}
	if v := counters["upstream_failed"].(float64); v != 0 {
		t.Errorf("upstream_failed %v, want 0: a cancelled question charges no server", v)
	}
	if v := counters["cancelled"].(float64); v != n {
		t.Errorf("cancelled %v, want %d", v, n)
	}
	select {
	case ga := <-ended:
		t.Fatalf("the connection ended (GOAWAY %v)", ga)
	default:
	}
}

// A CONTINUATION flood (CVE-2024-27316) through the binary: a header
// block that never ends is cut once it is past what a request within the
// header limit needs (GOAWAY ENHANCE_YOUR_CALM), and its question never
// reaches the upstream.
func TestContinuationFloodCut(t *testing.T) {
	t.Parallel()
	up := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.9"))
	d := startDohfwd(t, resetYAML(up), newPKI(t))
	c := d.dialFramer()
	ended := c.drain()
	c.get(1, "flood.reset.test")
	block := bytes.Clone(c.out.Bytes()[9:]) // the HEADERS frame's block, sent again without end
	c.out.Reset()
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block[:4]})
	junk := bytes.Repeat([]byte{0x40, 0x01, 'x', 0x03, 'a', 'b', 'c'}, 2000) // literal fields, new names
	sent := 0
	var err error
	for sent < 64<<20 && err == nil {
		c.fr.WriteContinuation(1, false, junk)
		err = c.flush()
		sent += len(junk)
	}
	ga := <-ended
	t.Logf("cut after %d bytes of CONTINUATION (%v), GOAWAY %v; the upstream saw %d queries", sent, err, ga, len(up.Queries()))
	if err == nil {
		t.Fatalf("dohfwd took %d bytes of one header block", sent)
	}
	if ga == nil || ga.ErrCode != http2.ErrCodeEnhanceYourCalm {
		t.Errorf("GOAWAY %v, want ENHANCE_YOUR_CALM", ga)
	}
	if n := len(up.Queries()); n != 0 {
		t.Errorf("the upstream saw %d queries, want 0", n)
	}
}
