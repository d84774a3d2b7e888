//go:build !wasip1

package doh

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
	"github.com/miekg/dns"
	"golang.org/x/net/http2"
)

// A stream freed and taken again has a new context.
func TestFreedStreamHasNewContext(t *testing.T) {
	st := &stream{}
	st.in = make([]byte, 0, pooledBufferSize*4+1) // kept out of the pool
	st.ctx.Cancel()
	new(h2conn).free(st)
	if st.ctx.Err() != nil {
		t.Fatal("a freed stream keeps its cancelled context")
	}
}

// TestResetFreesInFlightSlot: an HTTP/2 client that resets its stream
// while the engine waits on a silent upstream (a transaction timeout of
// a minute) ends the transaction at once: its socket is closed through
// the stream's context, seen through the engine's WithClient and
// WithTrace (Admit and TraceContext on), and the in-flight slot is free.
func TestResetFreesInFlightSlot(t *testing.T) {
	t.Parallel()
	up := upstreamtest.Start(t, upstreamtest.Drop())
	e, err := engine.New(engine.Config{FallbackServers: []string{up.String()}, TransactionTimeout: time.Minute},
		engine.Options{Network: engine.NativeNetwork{}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	admit := func(netip.Addr) (bool, time.Duration) { return true, 0 }
	base, c := startTLS(t, NewHandler(e, Options{Admit: admit, TraceContext: true}), Limits{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req := newRequest(t, "GET", base+DefaultPath+"?dns="+b64(pack(t, query(t, "slow.example.test.", dns.TypeA, 0))), nil).WithContext(ctx)
	errc := doInBackground(c, req)
	waitFor(t, "the upstream to read the query", func() bool { return len(up.Queries()) == 1 })
	if e.InFlight() != 1 {
		t.Fatalf("in flight %d, want 1", e.InFlight())
	}
	cancel()
	<-errc
	waitFor(t, "the in-flight slot to be free", func() bool { return e.InFlight() == 0 })
	if c := e.Counters(); c.Cancelled != 1 || c.UpstreamFailed != 0 {
		t.Fatalf("cancelled %d, upstream failed %d: want 1 and 0", c.Cancelled, c.UpstreamFailed)
	}
}

// TestHeadersFrameForms: the server reads HEADERS frames itself (not
// through the Framer): padded and with a priority they are answered, a
// block continued in CONTINUATION too; padding longer than the frame
// resets that stream only, and HEADERS on stream 0 ends the connection.
func TestHeadersFrameForms(t *testing.T) {
	t.Parallel()
	addr, _ := startPlainLimits(t, NewHandler(&recordingResolver{}, Options{}), Limits{})
	c := dialRaw(t, addr)
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.block(getPath(t, "padded.example.")),
		EndStream: true, EndHeaders: true, PadLength: 7, Priority: http2.PriorityParam{StreamDep: 0, Weight: 200, Exclusive: true}})
	blk := c.block(getPath(t, "continued.example."))
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: blk[:5], EndStream: true})
	c.fr.WriteContinuation(3, true, blk[5:])
	c.fr.WriteRawFrame(http2.FrameHeaders, http2.FlagHeadersPadded|http2.FlagHeadersEndHeaders|http2.FlagHeadersEndStream, 5, []byte{0xff})
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 7, BlockFragment: c.block(getPath(t, "after.example.")),
		EndStream: true, EndHeaders: true})
	c.flush()
	answered := map[uint32]bool{}
	var reset *http2.RSTStreamFrame
	ga, err := c.readUntil(5*time.Second, func(f http2.Frame) bool {
		switch f := f.(type) {
		case *http2.DataFrame:
			if f.StreamEnded() {
				answered[f.StreamID] = true
			}
		case *http2.RSTStreamFrame:
			r := *f
			reset = &r
		}
		return len(answered) == 3 && reset != nil
	})
	if err != nil || ga != nil {
		t.Fatalf("connection ended: %v %v", err, ga)
	}
	if !answered[1] || !answered[3] || !answered[7] {
		t.Errorf("answered %v, want streams 1, 3 and 7", answered)
	}
	if reset.StreamID != 5 || reset.ErrCode != http2.ErrCodeProtocol {
		t.Errorf("RST_STREAM %d %v, want stream 5 PROTOCOL_ERROR", reset.StreamID, reset.ErrCode)
	}

	c = dialRaw(t, addr)
	c.fr.WriteRawFrame(http2.FrameHeaders, http2.FlagHeadersEndHeaders|http2.FlagHeadersEndStream, 0, c.block(getPath(t, "zero.example.")))
	c.flush()
	ga, err = c.readUntil(5*time.Second, nil)
	if ga == nil || ga.ErrCode != http2.ErrCodeProtocol {
		t.Fatalf("HEADERS on stream 0: GOAWAY %v (%v), want PROTOCOL_ERROR", ga, err)
	}
}
