//go:build !wasip1

package doh

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/enginetest"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
	"github.com/miekg/dns"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// The known HTTP/2 attacks, each against a real server on loopback. Each
// test asserts what a naive server gets wrong, and that a normal client on
// another connection keeps getting answers within 100 ms meanwhile.
//
// Memory bound of one connection, whatever its client does: the 8 KiB
// read buffer; at most maxPendingWrite (256 KiB) of frames waiting for the
// socket, plus one frame's reply, before the reader stops reading; at most
// MaxConcurrentStreams (250) open streams and as many reset ones whose
// questions are still stopping (one more closes the connection), each a
// pooled request state of about 8 KiB plus its response (at most one DNS message, 64 KiB, held only while
// flow control blocks it, and no longer than WriteTimeout); a header block
// is decoded as it arrives and cut at twice MaxHeaderBytes (32 KiB).

// startPlainLimits serves h with NewPlainServer and l on 127.0.0.1 and
// returns the address.
//
// With DOH_ATTACKS_ON_NETHTTP=1 the handler is hidden behind a plain
// http.HandlerFunc, so the same tests run against net/http with
// golang.org/x/net/http2 (the server this one replaced): a way to see
// which protections are this server's own.
func startPlainLimits(t testing.TB, h http.Handler, l Limits) (string, *Server) {
	t.Helper()
	if os.Getenv("DOH_ATTACKS_ON_NETHTTP") == "1" {
		h = http.HandlerFunc(h.ServeHTTP)
	}
	srv := NewPlainServer(h, l)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), srv
}

// rawClient speaks HTTP/2 frame by frame, as an attacker does.
type rawClient struct {
	t   testing.TB
	nc  net.Conn
	fr  *http2.Framer
	enc *hpack.Encoder
	blk bytes.Buffer
	out bytes.Buffer // frames not yet written
}

// dialRaw opens an h2c connection and sends the preface and settings.
func dialRaw(t testing.TB, addr string, settings ...http2.Setting) *rawClient {
	t.Helper()
	c := openRaw(t, addr, settings...)
	c.flush()
	return c
}

// openRaw opens an h2c connection and buffers the preface and settings,
// unsent.
func openRaw(t testing.TB, addr string, settings ...http2.Setting) *rawClient {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	c := &rawClient{t: t, nc: nc}
	c.fr = http2.NewFramer(&c.out, nc)
	c.fr.AllowIllegalWrites = true
	c.fr.SetMaxReadFrameSize(1 << 20)
	c.enc = hpack.NewEncoder(&c.blk)
	c.out.WriteString(http2.ClientPreface)
	c.fr.WriteSettings(settings...)
	return c
}

// block encodes a GET for path as a header block, with extra fields.
func (c *rawClient) block(path string, extra ...hpack.HeaderField) []byte {
	c.blk.Reset()
	for _, f := range append([]hpack.HeaderField{
		{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "http"},
		{Name: ":authority", Value: "localhost"}, {Name: ":path", Value: path},
	}, extra...) {
		c.enc.WriteField(f)
	}
	return slices.Clone(c.blk.Bytes())
}

func (c *rawClient) flush() error {
	_, err := c.nc.Write(c.out.Bytes())
	c.out.Reset()
	return err
}

// readUntil reads frames until want says stop or the connection ends;
// it returns the GOAWAY if one came.
func (c *rawClient) readUntil(d time.Duration, want func(http2.Frame) bool) (*http2.GoAwayFrame, error) {
	c.nc.SetReadDeadline(time.Now().Add(d))
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return nil, err
		}
		if ga, ok := f.(*http2.GoAwayFrame); ok {
			return ga, nil
		}
		if want != nil && want(f) {
			return nil, nil
		}
	}
}

// getPath is a GET for name's A record at the DoH path.
func getPath(t testing.TB, name string) string {
	return DefaultPath + "?dns=" + b64(pack(t, query(t, name, dns.TypeA, 0)))
}

// prober is a normal client on its own connection: it asks every 20 ms
// and records how long each answer took.
type prober struct {
	mu    sync.Mutex
	took  []time.Duration
	fails []error
	stop  chan struct{}
	done  chan struct{}
}

func startProber(t *testing.T, base string) *prober {
	t.Helper()
	p := &prober{stop: make(chan struct{}), done: make(chan struct{})}
	c := h2cClient(t)
	url := base + getPath(t, "probe.example.")
	go func() {
		defer close(p.done)
		for {
			select {
			case <-p.stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			start := time.Now()
			resp, err := c.Get(url)
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					err = fmt.Errorf("status %d", resp.StatusCode)
				}
			}
			p.mu.Lock()
			if err != nil {
				p.fails = append(p.fails, err)
			} else {
				p.took = append(p.took, time.Since(start))
			}
			p.mu.Unlock()
		}
	}()
	return p
}

// check stops the prober and asserts the normal client was answered
// every time, in 100 ms at the median. The median, not the slowest: the
// machine is shared by several engineers' test runs and the race detector
// slows everything (the p90 and the slowest are logged).
func (p *prober) check(t *testing.T) {
	t.Helper()
	// An attack cut short may end before the prober asked much.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		p.mu.Lock()
		n := len(p.took) + len(p.fails)
		p.mu.Unlock()
		if n >= 5 {
			break
		}
	}
	close(p.stop)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.fails) > 0 {
		t.Errorf("the normal client failed %d times: %v", len(p.fails), p.fails[0])
	}
	if len(p.took) < 3 {
		t.Fatalf("the normal client got %d answers", len(p.took))
	}
	slices.Sort(p.took)
	median, p90, worst := p.took[len(p.took)/2], p.took[len(p.took)*9/10], p.took[len(p.took)-1]
	t.Logf("normal client: %d answers, median %v, p90 %v, slowest %v", len(p.took), median, p90, worst)
	if median > 100*time.Millisecond {
		t.Errorf("normal client median %v, want within 100 ms", median)
	}
}

// countingEngine is an engine over a real loopback upstream that answers
// every question (after delay) and counts the queries.
func countingEngine(t *testing.T, delay time.Duration) (*engine.Engine, *upstreamtest.Server) {
	t.Helper()
	h := upstreamtest.Answer("@ 60 IN A 192.0.2.1")
	if delay > 0 {
		h = upstreamtest.Delay(delay, h)
	}
	up := upstreamtest.Start(t, h)
	e, err := engine.New(engine.Config{FallbackServers: []string{up.String()}}, engine.Options{Network: engine.NativeNetwork{}})
	if err != nil {
		t.Fatal(err)
	}
	return e, up
}

// TestRapidResetNotForwarded floods HEADERS + RST_STREAM on one
// connection (CVE-2023-44487), each pair in one write, every question a
// new name, and counts the queries the upstream reads: at most 1 % of the
// reset streams may reach it. A server that starts each request when its
// HEADERS arrives forwards most of them (Go's did 41-51 %).
func TestRapidResetNotForwarded(t *testing.T) {
	e, up := countingEngine(t, 0)
	addr, _ := startPlainLimits(t, NewHandler(e, Options{}), Limits{})
	p := startProber(t, "http://"+addr)

	c := dialRaw(t, addr)
	go c.readUntil(time.Minute, func(http2.Frame) bool { return false }) // drain
	const n = 5000
	for i := range n {
		id := uint32(2*i + 1)
		c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.block(getPath(t, fmt.Sprintf("r%d.example.", i))),
			EndStream: true, EndHeaders: true})
		c.fr.WriteRSTStream(id, http2.ErrCodeCancel)
		if err := c.flush(); err != nil {
			t.Fatalf("after %d resets: %v", i, err)
		}
	}
	time.Sleep(200 * time.Millisecond) // anything started has reached the upstream by now
	p.check(t)
	got := 0
	for _, q := range up.Queries() {
		if strings.HasPrefix(q.Msg.Question[0].Name, "r") {
			got++
		}
	}
	t.Logf("%d of %d reset streams reached the upstream", got, n)
	if got > n/100 {
		t.Errorf("%d of %d reset streams reached the upstream, want at most 1 %%", got, n)
	}
}

// TestResetBeforeStartNeverReachesResolver: a stream reset in the same
// write as its HEADERS is never handed to the resolver, exactly.
func TestResetBeforeStartNeverReachesResolver(t *testing.T) {
	t.Parallel()
	res := &blockingResolver{release: make(chan struct{})}
	defer close(res.release)
	addr, _ := startPlainLimits(t, NewHandler(res, Options{}), Limits{})
	c := dialRaw(t, addr)
	for i := range 100 {
		id := uint32(2*i + 1)
		c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.block(getPath(t, "x.example.")), EndStream: true, EndHeaders: true})
		c.fr.WriteRSTStream(id, http2.ErrCodeCancel)
	}
	// A last stream, not reset, proves the server read everything before.
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 201, BlockFragment: c.block(getPath(t, "last.example.")), EndStream: true, EndHeaders: true})
	c.flush()
	waitFor(t, "the last question", func() bool { return res.calls.Load() >= 1 })
	time.Sleep(50 * time.Millisecond)
	if n := res.calls.Load(); n != 1 {
		t.Fatalf("the resolver was asked %d times, want 1 (only the stream not reset)", n)
	}
}

// blockingResolver holds every question until release closes or the
// client goes away.
type blockingResolver struct {
	calls   atomic.Int64
	release chan struct{}
}

func (b *blockingResolver) ResolveMsg(ctx context.Context, q *dns.Msg) enginetest.Response {
	b.calls.Add(1)
	select {
	case <-ctx.Done():
		return enginetest.Response{Msg: new(dns.Msg).SetRcode(q, dns.RcodeServerFailure), Response: engine.Response{Result: engine.ResultCancelled}}
	case <-b.release:
	}
	m := new(dns.Msg).SetReply(q)
	return enginetest.Response{Msg: m, Response: engine.Response{Result: engine.ResultAnswer}}
}

func (b *blockingResolver) Resolve(ctx context.Context, query, dst []byte) engine.Response {
	return enginetest.ResolveByMsg(b, ctx, query, dst)
}

// TestContinuationFlood: HEADERS without END_HEADERS and then CONTINUATION
// frames without end. The server must cut the connection once the block
// is past what any request within the header limit needs; a naive server
// reads (and buffers) for as long as the client sends.
func TestContinuationFlood(t *testing.T) {
	addr, _ := startPlainLimits(t, NewHandler(&recordingResolver{}, Options{}), Limits{})
	p := startProber(t, "http://"+addr)
	c := dialRaw(t, addr)
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.block(getPath(t, "x.example.")), EndHeaders: false})
	c.flush()
	junk := bytes.Repeat([]byte{0x40, 0x01, 'x', 0x03, 'a', 'b', 'c'}, 2000) // literal fields, new names
	sent := 0
	goaway := make(chan *http2.GoAwayFrame, 1)
	go func() { ga, _ := c.readUntil(10*time.Second, nil); goaway <- ga }()
	var err error
	for sent < 64<<20 && err == nil {
		c.fr.WriteContinuation(1, false, junk)
		err = c.flush()
		sent += len(junk)
	}
	p.check(t)
	ga := <-goaway
	t.Logf("connection cut after %d bytes of CONTINUATION (write error %v), GOAWAY %v", sent, err, ga)
	if err == nil {
		t.Fatalf("the server took %d bytes of one header block", sent)
	}
	if ga == nil || ga.ErrCode != http2.ErrCodeEnhanceYourCalm {
		t.Errorf("GOAWAY %v, want ENHANCE_YOUR_CALM", ga)
	}
}

// TestHPACKBomb: a header list that decodes far past the limit from a
// small block (one large field in the dynamic table, referenced many
// times). The request gets 431; the decoded list is never held; the
// connection keeps working. A naive server decodes and keeps it all.
func TestHPACKBomb(t *testing.T) {
	addr, _ := startPlainLimits(t, NewHandler(&recordingResolver{}, Options{}), Limits{})
	p := startProber(t, "http://"+addr)
	c := dialRaw(t, addr)
	big := hpack.HeaderField{Name: "x-bomb", Value: strings.Repeat("b", 3000)}
	// Stream 1 puts the field in the dynamic table (index 62).
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.block(getPath(t, "a.example."), big), EndStream: true, EndHeaders: true})
	// Stream 3 asks the same path (every field indexed, nothing added to
	// the table) and refers to the big field 4000 times: 12 MB decoded
	// from 4 kB.
	blk := c.block(getPath(t, "a.example."))
	blk = append(blk, bytes.Repeat([]byte{0x80 | 62}, 4000)...)
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: blk, EndStream: true, EndHeaders: true})
	// Stream 5 is a normal request on the same connection.
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 5, BlockFragment: c.block(getPath(t, "c.example.")), EndStream: true, EndHeaders: true})
	c.flush()
	dec := hpack.NewDecoder(4096, nil)
	status := map[uint32]string{}
	_, err := c.readUntil(5*time.Second, func(f http2.Frame) bool {
		if h, ok := f.(*http2.HeadersFrame); ok {
			fields, _ := dec.DecodeFull(h.HeaderBlockFragment())
			for _, f := range fields {
				if f.Name == ":status" {
					status[h.StreamID] = f.Value
				}
			}
		}
		if r, ok := f.(*http2.RSTStreamFrame); ok {
			status[r.StreamID] = "RST_STREAM " + r.ErrCode.String()
		}
		return len(status) == 3
	})
	p.check(t)
	if err != nil {
		t.Fatalf("reading the answers: %v (statuses %v)", err, status)
	}
	if status[1] != "200" || status[3] != "431" || status[5] != "200" {
		t.Errorf("statuses %v, want 1:200 3:431 5:200", status)
	}
}

// floodControl sends frames of one kind without reading the replies. The
// server must stop reading once its replies back up (the client's writes
// block) or drop the connection; a naive server reads on and queues every
// ACK, and the whole flood goes through.
func floodControl(t *testing.T, frame func(c *rawClient)) {
	addr, _ := startPlainLimits(t, NewHandler(&recordingResolver{}, Options{}), Limits{})
	p := startProber(t, "http://"+addr)
	c := dialRaw(t, addr)
	const total = 64 << 20
	var one bytes.Buffer
	c.fr = http2.NewFramer(&one, c.nc)
	frame(c)
	chunk := bytes.Repeat(one.Bytes(), (64<<10)/one.Len())
	sent := 0
	c.nc.SetWriteDeadline(time.Now().Add(3 * time.Second))
	var err error
	for sent < total && err == nil {
		var n int
		n, err = c.nc.Write(chunk)
		sent += n
	}
	p.check(t)
	t.Logf("the server stopped taking the flood after %d bytes (%v)", sent, err)
	if err == nil {
		t.Fatalf("the server read all %d bytes of the flood without being read from", sent)
	}
}

// TestPingFlood: PINGs without reading the ACKs.
func TestPingFlood(t *testing.T) {
	floodControl(t, func(c *rawClient) { c.fr.WritePing(false, [8]byte{1, 2, 3, 4, 5, 6, 7, 8}) })
}

// TestSettingsFlood: SETTINGS without reading the ACKs.
func TestSettingsFlood(t *testing.T) {
	floodControl(t, func(c *rawClient) {
		c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 65535})
	})
}

// TestZeroWindowNeverOpens: a client that sets its window to 0 and never
// opens it gets its connection closed after WriteTimeout instead of
// holding its streams (and their answers) for ever.
func TestZeroWindowNeverOpens(t *testing.T) {
	t.Parallel()
	l := Limits{WriteTimeout: 500 * time.Millisecond}
	addr, srv := startPlainLimits(t, NewHandler(&recordingResolver{}, Options{}), l)
	p := startProber(t, "http://"+addr)
	c := dialRaw(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	for i := range 100 {
		c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: c.block(getPath(t, "z.example.")), EndStream: true, EndHeaders: true})
	}
	c.flush()
	start := time.Now()
	ga, err := c.readUntil(5*time.Second, func(f http2.Frame) bool {
		if d, ok := f.(*http2.DataFrame); ok && len(d.Data()) > 0 {
			t.Errorf("DATA sent into a zero window")
		}
		return false
	})
	took := time.Since(start)
	p.check(t)
	t.Logf("connection ended after %v: GOAWAY %v, %v; %d requests active", took.Round(time.Millisecond), ga, err, srv.Active())
	if ga == nil && !errors.Is(err, io.EOF) {
		t.Fatalf("the connection was held (%v)", err)
	}
	if took > 3*time.Second {
		t.Errorf("held %v, want about WriteTimeout (500 ms)", took)
	}
	waitFor(t, "the streams to be freed", func() bool { return srv.Active() == 0 })
}

// TestStreamsPastTheLimit: a client that opens more streams than
// MAX_CONCURRENT_STREAMS gets REFUSED_STREAM for the rest; the resolver
// holds at most the limit. A naive server starts them all.
func TestStreamsPastTheLimit(t *testing.T) {
	t.Parallel()
	res := &blockingResolver{release: make(chan struct{})}
	addr, _ := startPlainLimits(t, NewHandler(res, Options{}), Limits{MaxConcurrentStreams: 50})
	c := dialRaw(t, addr)
	for i := range 80 {
		c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: c.block(getPath(t, fmt.Sprintf("s%d.example.", i))), EndStream: true, EndHeaders: true})
	}
	c.flush()
	refused := 0
	_, err := c.readUntil(5*time.Second, func(f http2.Frame) bool {
		if r, ok := f.(*http2.RSTStreamFrame); ok && r.ErrCode == http2.ErrCodeRefusedStream {
			refused++
		}
		return refused == 30
	})
	if err != nil {
		t.Fatalf("refused %d: %v", refused, err)
	}
	waitFor(t, "50 questions", func() bool { return res.calls.Load() == 50 })
	time.Sleep(50 * time.Millisecond)
	if n := res.calls.Load(); n != 50 {
		t.Errorf("resolver holds %d questions, want the limit 50", n)
	}
	close(res.release)
}

// TestHeaderStallCut (slowloris on HTTP/2 headers): a header block that is not completed
// within the header timeout (5 s) closes the connection, whether the
// client falls silent or trickles a CONTINUATION every second; the idle
// timeout (2 min) does not apply.
func TestHeaderStallCut(t *testing.T) {
	t.Parallel()
	for _, trickle := range []bool{false, true} {
		t.Run(map[bool]string{false: "silence", true: "trickle"}[trickle], func(t *testing.T) {
			t.Parallel()
			base, _ := startTLS(t, NewHandler(&recordingResolver{}, Options{}), Limits{})
			_, pool := testCert()
			tc, err := tls.Dial("tcp", strings.TrimPrefix(base, "https://"), &tls.Config{RootCAs: pool, NextProtos: []string{"h2"}})
			if err != nil {
				t.Fatal(err)
			}
			defer tc.Close()
			c := &rawClient{t: t, nc: tc}
			c.fr = http2.NewFramer(&c.out, tc)
			c.enc = hpack.NewEncoder(&c.blk)
			c.out.WriteString(http2.ClientPreface)
			c.fr.WriteSettings()
			blk := c.block(getPath(t, "x.example."))
			c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: blk[:4]})
			c.flush()
			start := time.Now()
			if trickle {
				go func() {
					for i := 4; i < len(blk); i++ {
						time.Sleep(time.Second)
						c.fr.WriteContinuation(1, false, blk[i:i+1])
						if c.flush() != nil {
							return
						}
					}
				}()
			}
			ga, err := c.readUntil(30*time.Second, nil)
			if ga != nil { // then the close
				_, err = c.readUntil(time.Second, nil)
			}
			took := time.Since(start)
			t.Logf("cut after %v (GOAWAY %v, %v)", took.Round(time.Millisecond), ga, err)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("connection still open after %v", took)
			}
			if took < 4*time.Second || took > 7*time.Second {
				t.Errorf("cut after %v, want at the 5 s header timeout", took)
			}
		})
	}
}
