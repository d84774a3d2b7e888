package host

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/dohfwd/dohfwd/edge/moduletest"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
)

// The dohfwd-edge command (Main) answers DoH over TLS with package doh's
// own HTTP/2 server, as dohfwd serve does, not net/http's. A raw HTTP/2
// client tells them apart by what each writes: doh's server announces its
// four settings starting with MAX_CONCURRENT_STREAMS and puts date right
// after :status, before the handler's fields in the handler's order;
// net/http's (x/net/http2) announces MAX_FRAME_SIZE first and writes the
// fields sorted by name (cache-control, content-length, content-type,
// date).
func TestWazeroMainServesWithDoHHTTP2Server(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.7"))
	_, wasm := moduletest.Build(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "edge.yaml")
	err = os.WriteFile(cfg, fmt.Appendf(nil, `listen: {https: %q, http: "", dot: "", dns: "", admin: ""}
scopes:
  - {name: test, default_route: true, servers: [%q]}
fallback_servers: []
cache: {max_entries: 0}
log: {level: error}
`, addr, up.String()), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var stderr bytes.Buffer
	go func() {
		done <- Main(ctx, []string{"--config", cfg, "--module", wasm, "--cache-dir", moduletest.CacheDir(t)}, &stderr, "test")
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Main: %v\n%s", err, stderr.String())
			}
		case <-time.After(2 * time.Minute): // wazero does not stop a compilation under way
			t.Error("Main did not return after its context ended")
		}
	})

	// The listener comes up once the module is compiled: a few seconds,
	// minutes under a loaded make test when the module changed.
	var conn *tls.Conn
	for deadline := time.Now().Add(4 * time.Minute); ; {
		conn, err = tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}}) // self-signed, loopback
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dohfwd-edge did not listen: %v\n%s", err, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	if p := conn.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("ALPN %q, want h2", p)
	}
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}

	q := query("front.example.org", dns.TypeA)
	wire, _ := q.Pack()
	var blk bytes.Buffer
	enc := hpack.NewEncoder(&blk)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", addr},
		{":path", "/dns-query?dns=" + base64.RawURLEncoding.EncodeToString(wire)}, {"accept", "application/dns-message"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: blk.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}

	var settings []http2.SettingID
	var fields []string
	var body []byte
	for ended := false; !ended; {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading frames: %v (fields %v)", err, fields)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() && settings == nil {
				f.ForeachSetting(func(s http2.Setting) error { settings = append(settings, s.ID); return nil })
				fr.WriteSettingsAck()
			}
		case *http2.MetaHeadersFrame:
			for _, hf := range f.Fields {
				fields = append(fields, hf.Name)
			}
			if got := f.PseudoValue("status"); got != "200" {
				t.Fatalf(":status %s, want 200", got)
			}
			ended = f.StreamEnded()
		case *http2.DataFrame:
			body = append(body, f.Data()...)
			ended = f.StreamEnded()
		case *http2.RSTStreamFrame, *http2.GoAwayFrame:
			t.Fatalf("unexpected %v", f)
		}
	}
	m := new(dns.Msg)
	if err := m.Unpack(body); err != nil || len(m.Answer) != 1 || m.Answer[0].(*dns.A).A.String() != "192.0.2.7" {
		t.Fatalf("want the upstream's A 192.0.2.7, got %v (%v)", m, err)
	}
	wantSettings := []http2.SettingID{http2.SettingMaxConcurrentStreams, http2.SettingMaxFrameSize,
		http2.SettingMaxHeaderListSize, http2.SettingInitialWindowSize}
	if fmt.Sprint(settings) != fmt.Sprint(wantSettings) {
		t.Errorf("server settings %v, want doh's %v", settings, wantSettings)
	}
	// Alt-Svc (HTTP/3 on the UDP twin) comes before the answer's fields.
	fields = slices.DeleteFunc(fields, func(f string) bool { return f == "alt-svc" })
	if len(fields) < 3 || fields[1] != "date" || fields[2] != "content-type" {
		t.Errorf("response fields %v: want :status, date, then the handler's content-type first, as doh's server writes them", strings.Join(fields, ", "))
	}

	// HTTP/1.1 still goes to net/http and on to the module; a body too
	// big for a DNS message is refused from its Content-Length.
	h1 := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, Timeout: 20 * time.Second}
	defer h1.CloseIdleConnections()
	resp, err := h1.Get("https://" + addr + "/dns-query?dns=" + base64.RawURLEncoding.EncodeToString(wire))
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 1 || resp.StatusCode != 200 || m.Unpack(body) != nil || len(m.Answer) != 1 {
		t.Fatalf("HTTP/1.1: %s %d %q, want 200 with the answer", resp.Proto, resp.StatusCode, body)
	}
	resp, err = h1.Post("https://"+addr+"/dns-query", "application/dns-message", bytes.NewReader(make([]byte, 70000)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("HTTP/1.1 POST of 70000 bytes: %d, want 413", resp.StatusCode)
	}
}
