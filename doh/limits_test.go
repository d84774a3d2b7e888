//go:build !wasip1

package doh

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestHTTP2SettingsAnnounceLimits reads the server's first SETTINGS frame
// over a real TLS connection (ALPN h2): the limits are announced.
func TestHTTP2SettingsAnnounceLimits(t *testing.T) {
	t.Parallel()
	l := Limits{MaxConcurrentStreams: 77, MaxReadFrameSize: 32 << 10, MaxHeaderBytes: 8 << 10}
	base, _ := startTLS(t, NewHandler(&recordingResolver{}, Options{}), l)
	_, pool := testCert()
	conn, err := tls.Dial("tcp", strings.TrimPrefix(base, "https://"), &tls.Config{RootCAs: pool, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if p := conn.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("ALPN %q, want h2", p)
	}
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(conn, http2.ClientPreface)
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	f, err := fr.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok {
		t.Fatalf("first frame %v, want SETTINGS", f)
	}
	want := map[http2.SettingID]uint32{
		http2.SettingMaxConcurrentStreams: 77,
		http2.SettingMaxFrameSize:         32 << 10,
	}
	for id, v := range want {
		if got, ok := sf.Value(id); !ok || got != v {
			t.Errorf("%v = %d (sent %v), want %d", id, got, ok, v)
		}
	}
	// net/http adds its own slack to MaxHeaderBytes; the setting must be
	// there and in the same range.
	if got, ok := sf.Value(http2.SettingMaxHeaderListSize); !ok || got < 8<<10 || got > 16<<10 {
		t.Errorf("MAX_HEADER_LIST_SIZE = %d (sent %v), want about %d", got, ok, 8<<10)
	}
}

// TestSlowHeadersAreCut: a client that starts a request and never ends
// its headers is disconnected after ReadHeaderTimeout.
func TestSlowHeadersAreCut(t *testing.T) {
	t.Parallel()
	base, _ := startTLS(t, NewHandler(&recordingResolver{}, Options{}), Limits{ReadHeaderTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond})
	_, pool := testCert()
	conn, err := tls.Dial("tcp", strings.TrimPrefix(base, "https://"), &tls.Config{RootCAs: pool, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "GET /dns-query?dns=AAABAAABAAAAAAAAB2V4YW1wbGUDb3JnAAABAAE HTTP/1.1\r\nHost: x\r\n")
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	_, err = io.ReadAll(conn)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the server kept a slow client for 5 s")
	}
	t.Logf("slow client cut after %v (err %v)", time.Since(start).Round(time.Millisecond), err)
}

// TestHTTP2IdleGoAway: an HTTP/2 connection without requests for
// IdleTimeout gets a GOAWAY (NO_ERROR, the last stream it opened) and is
// closed; one with a request in between is not cut early.
func TestHTTP2IdleGoAway(t *testing.T) {
	t.Parallel()
	addr, _ := startPlainLimits(t, NewHandler(&recordingResolver{}, Options{}), Limits{IdleTimeout: 600 * time.Millisecond})
	c := dialRaw(t, addr)
	start := time.Now()
	time.Sleep(300 * time.Millisecond)
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.block(getPath(t, "idle.example.")), EndStream: true, EndHeaders: true})
	c.flush()
	answered := time.Duration(0)
	ga, err := c.readUntil(5*time.Second, func(f http2.Frame) bool {
		if d, ok := f.(*http2.DataFrame); ok && d.StreamEnded() {
			answered = time.Since(start)
		}
		return false
	})
	took := time.Since(start)
	if ga == nil || ga.ErrCode != http2.ErrCodeNo || ga.LastStreamID != 1 {
		t.Fatalf("GOAWAY %v (%v), want NO_ERROR with last stream 1", ga, err)
	}
	if answered == 0 || took-answered < 500*time.Millisecond || took > 3*time.Second {
		t.Errorf("answered at %v, GOAWAY at %v: want the idle timeout (600 ms) counted from the answer", answered, took)
	}
	if _, err := c.readUntil(3*time.Second, nil); err != io.EOF {
		t.Errorf("after the GOAWAY: %v, want the connection closed", err)
	}
}

// TestHTTP2ResponseHeaders: a DoH answer over the HTTP/2 server carries
// the headers net/http's server sent: Date, Content-Type, Content-Length,
// Cache-Control and Vary on the DoH path.
func TestHTTP2ResponseHeaders(t *testing.T) {
	t.Parallel()
	base, c := startTLS(t, NewHandler(&recordingResolver{}, Options{}), Limits{})
	r, body := do(t, c, newRequest(t, "GET", base+getPath(t, "h.example."), nil))
	if r.ProtoMajor != 2 || r.StatusCode != 200 {
		t.Fatalf("%s %d", r.Proto, r.StatusCode)
	}
	want := map[string]string{
		"Content-Type":   MediaTypeDNS,
		"Content-Length": strconv.Itoa(len(body)),
		"Cache-Control":  "max-age=120",
		"Vary":           "Accept",
	}
	for k, v := range want {
		if got := r.Header.Get(k); got != v {
			t.Errorf("%s: %q, want %q", k, got, v)
		}
	}
	if d, err := http.ParseTime(r.Header.Get("Date")); err != nil || time.Since(d).Abs() > time.Minute {
		t.Errorf("Date %q: %v", r.Header.Get("Date"), err)
	}
}

// TestHTTP2ShutdownDrains: Shutdown sends GOAWAY(NO_ERROR) at once, still
// answers the stream in flight, refuses nothing it had accepted, and
// returns once the connection has ended.
func TestHTTP2ShutdownDrains(t *testing.T) {
	t.Parallel()
	res := &blockingResolver{release: make(chan struct{})}
	addr, srv := startPlainLimits(t, NewHandler(res, Options{}), Limits{})
	c := dialRaw(t, addr)
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.block(getPath(t, "drain.example.")), EndStream: true, EndHeaders: true})
	c.flush()
	waitFor(t, "the question", func() bool { return res.calls.Load() == 1 })
	done := make(chan error, 1)
	go func() { done <- srv.Shutdown(context.Background()) }()
	ga, err := c.readUntil(5*time.Second, nil)
	if ga == nil || ga.ErrCode != http2.ErrCodeNo || ga.LastStreamID != 1 {
		t.Fatalf("GOAWAY %v (%v), want NO_ERROR with last stream 1", ga, err)
	}
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned (%v) with a stream in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(res.release)
	answered := false
	_, err = c.readUntil(5*time.Second, func(f http2.Frame) bool {
		if d, ok := f.(*http2.DataFrame); ok && d.StreamID == 1 && d.StreamEnded() {
			answered = true
		}
		return false
	})
	if !answered || err != io.EOF {
		t.Fatalf("answered %v, then %v: want the answer, then the connection closed", answered, err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Shutdown did not return after the last stream")
	}
}
