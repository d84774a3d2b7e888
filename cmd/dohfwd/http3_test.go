package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/dohfwd/dohfwd/engine/upstreamtest"
)

// http3Addr is the address of d's HTTP/3 listener, from its listening
// event.
func (d *dohfwd) http3Addr() string {
	d.t.Helper()
	ev := d.waitEvent(10*time.Second, func(ev map[string]any) bool {
		return ev["message"] == "listening" && ev["listener"] == "http3"
	})
	return ev["addr"].(string)
}

// h3Client is quic-go's HTTP/3 client trusting d's test CA.
func (d *dohfwd) h3Client() *http.Client {
	tr := &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: d.pki.Pool}}
	d.t.Cleanup(func() { tr.Close() })
	return &http.Client{Transport: tr, Timeout: 15 * time.Second}
}

// h3Request is one row of the table both HTTP versions are asked.
type h3Request struct {
	name    string
	method  string
	target  string // path and query
	ctype   string
	accept  string
	body    []byte
	status  int
	padded  bool // the answer's length is a multiple of 468
	noStore bool // Cache-Control: no-store
}

// The same requests over HTTP/2 and HTTP/3 (one handler serves all
// HTTP versions) get the same status, headers and body: every HTTP error
// status, GET, POST, JSON, Cache-Control, padding, Server-Timing, the
// setup page and the profile. HTTP/2 answers advertise HTTP/3 with
// Alt-Svc on the UDP port it listens on.
func TestHTTP3AnswersAsHTTP2(t *testing.T) {
	t.Parallel()
	d, _, _ := startFrontendServer(t)
	h3addr := d.http3Addr()
	h3port := netip.MustParseAddrPort(h3addr).Port()
	h2c, h3c := d.client(), d.h3Client()

	pack := func(m *dns.Msg) []byte {
		b, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	b64 := func(m *dns.Msg) string { return base64.RawURLEncoding.EncodeToString(pack(m)) }
	padded := newQuery("www.e2e.test", dns.TypeA)
	padded.SetEdns0(1232, false)
	padded.IsEdns0().Option = append(padded.IsEdns0().Option, &dns.EDNS0_PADDING{Padding: make([]byte, 64)})
	response := newQuery("www.e2e.test", dns.TypeA)
	response.Response = true
	query := newQuery("www.e2e.test", dns.TypeA)
	query.Id = 0

	rows := []h3Request{
		{name: "GET wire", method: "GET", target: "/dns-query?dns=" + b64(query), accept: "application/dns-message", status: 200},
		{name: "POST wire", method: "POST", target: "/dns-query", ctype: "application/dns-message", body: pack(newQuery("www.e2e.test", dns.TypeAAAA)), status: 200},
		{name: "POST padded", method: "POST", target: "/dns-query", ctype: "application/dns-message", body: pack(padded), status: 200, padded: true},
		{name: "NXDOMAIN", method: "POST", target: "/dns-query", ctype: "application/dns-message", body: pack(newQuery("nope.e2e.test", dns.TypeA)), status: 200},
		{name: "SERVFAIL", method: "POST", target: "/dns-query", ctype: "application/dns-message", body: pack(newQuery("x.fail.test", dns.TypeA)), status: 200, noStore: true},
		{name: "JSON resolve", method: "GET", target: "/resolve?name=www.example.com&type=A", status: 200},
		{name: "JSON on the DoH path", method: "GET", target: "/dns-query?name=www.example.com&type=AAAA", accept: "application/dns-json", status: 200},
		{name: "no dns parameter", method: "GET", target: "/dns-query", status: 400},
		{name: "bad base64", method: "GET", target: "/dns-query?dns=!!!", status: 400},
		{name: "a response", method: "POST", target: "/dns-query", ctype: "application/dns-message", body: pack(response), status: 400},
		{name: "PUT", method: "PUT", target: "/dns-query", ctype: "application/dns-message", body: pack(query), status: 405},
		{name: "HEAD", method: "HEAD", target: "/dns-query?dns=" + b64(query), status: 405},
		{name: "too large", method: "POST", target: "/dns-query", ctype: "application/dns-message", body: make([]byte, 70000), status: 413},
		{name: "wrong media type", method: "POST", target: "/dns-query", ctype: "text/plain", body: pack(query), status: 415},
		{name: "other path", method: "GET", target: "/nope", status: 404},
		{name: "setup page", method: "GET", target: "/", accept: "text/html", status: 200},
		{name: "Apple profile", method: "GET", target: "/apple.mobileconfig", status: 200},
	}
	base := "https://" + d.HTTPS
	h3base := "https://" + h3addr
	for _, r := range rows {
		h2res, h2body := doRow(t, h2c, base, r)
		h3res, h3body := doRow(t, h3c, h3base, r)
		if h2res.ProtoMajor != 2 || h3res.ProtoMajor != 3 {
			t.Fatalf("%s: protocols %s and %s, want HTTP/2 and HTTP/3", r.name, h2res.Proto, h3res.Proto)
		}
		for _, c := range []struct {
			v    string
			res  *http.Response
			body []byte
		}{{"HTTP/2", h2res, h2body}, {"HTTP/3", h3res, h3body}} {
			if c.res.StatusCode != r.status {
				t.Errorf("%s over %s: status %d, want %d (%s)", r.name, c.v, c.res.StatusCode, r.status, c.body)
			}
			if want := fmt.Sprintf(`h3=":%d"; ma=86400`, h3port); c.res.Header.Get("Alt-Svc") != want {
				t.Errorf("%s over %s: Alt-Svc %q, want %q", r.name, c.v, c.res.Header.Get("Alt-Svc"), want)
			}
			if r.padded && len(c.body)%468 != 0 {
				t.Errorf("%s over %s: answer of %d bytes, not padded to 468", r.name, c.v, len(c.body))
			}
			if r.noStore && c.res.Header.Get("Cache-Control") != "no-store" {
				t.Errorf("%s over %s: Cache-Control %q, want no-store", r.name, c.v, c.res.Header.Get("Cache-Control"))
			}
			if r.status == 200 && r.target != "/" && r.target != "/apple.mobileconfig" && c.res.Header.Get("Server-Timing") == "" {
				t.Errorf("%s over %s: no Server-Timing", r.name, c.v)
			}
		}
		if diff := headerDiff(h2res.Header, h3res.Header); diff != "" {
			t.Errorf("%s: headers differ between HTTP/2 and HTTP/3:\n%s", r.name, diff)
		}
		if a, b := comparableBody(h2res, h2body), comparableBody(h3res, h3body); !bytes.Equal(a, b) {
			t.Errorf("%s: bodies differ:\nHTTP/2: %q\nHTTP/3: %q", r.name, a, b)
		}
	}
	// The SERVFAIL is asked upstream over both: its attempt events name
	// the client's protocol.
	for _, proto := range []string{"h2", "h3"} {
		d.waitEvent(5*time.Second, func(ev map[string]any) bool {
			return ev["message"] == "attempt" && ev["qname"] == "x.fail.test." && ev["proto"] == proto
		})
	}
}

func doRow(t *testing.T, c *http.Client, base string, r h3Request) (*http.Response, []byte) {
	t.Helper()
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	req, err := http.NewRequest(r.method, base+r.target, body)
	if err != nil {
		t.Fatal(err)
	}
	if r.ctype != "" {
		req.Header.Set("Content-Type", r.ctype)
	}
	if r.accept != "" {
		req.Header.Set("Accept", r.accept)
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", r.method, base+r.target, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", r.method, base+r.target, err)
	}
	return res, b
}

// headerDiff lists the header fields that differ, leaving out those that
// change from one response to the next: the date, the trace, the timing
// (a second ask is a cache hit) and max-age (the TTL counts down).
func headerDiff(a, b http.Header) string {
	skip := map[string]bool{"Date": true, "Traceresponse": true, "Server-Timing": true}
	var keys []string
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var out strings.Builder
	for _, k := range keys {
		if skip[k] {
			continue
		}
		va, vb := strings.Join(a[k], ", "), strings.Join(b[k], ", ")
		if k == "Cache-Control" && maxAgeClose(va, vb) {
			continue
		}
		if va != vb {
			fmt.Fprintf(&out, "  %s: %q vs %q\n", k, va, vb)
		}
	}
	return out.String()
}

var maxAge = regexp.MustCompile(`max-age=(\d+)`)

// maxAgeClose reports whether a and b are max-age values a second apart
// at most.
func maxAgeClose(a, b string) bool {
	ma, mb := maxAge.FindStringSubmatch(a), maxAge.FindStringSubmatch(b)
	if ma == nil || mb == nil {
		return false
	}
	x, _ := strconv.Atoi(ma[1])
	y, _ := strconv.Atoi(mb[1])
	return x-y <= 1 && y-x <= 1
}

var jsonTTL = regexp.MustCompile(`"TTL":\d+`)

// comparableBody is body with its TTLs zeroed (a cache hit's count down).
func comparableBody(res *http.Response, body []byte) []byte {
	switch res.Header.Get("Content-Type") {
	case "application/dns-message":
		m := new(dns.Msg)
		if m.Unpack(body) != nil {
			return body
		}
		for _, rrs := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
			for _, rr := range rrs {
				rr.Header().Ttl = 0
			}
		}
		b, _ := m.Pack()
		return b
	case "application/dns-json":
		return jsonTTL.ReplaceAll(body, []byte(`"TTL":0`))
	}
	return body
}

// The HTTP/3 listener serves the TLS listeners' certificate and follows
// its reload: once the files change, a new QUIC connection gets the new
// certificate, and a connection opened before goes on answering with the
// old one (it is not dropped).
func TestHTTP3CertificateReloadKeepsOpenConnections(t *testing.T) {
	t.Parallel()
	nsd := startNSD(t)
	old := newPKI(t)
	d := startDohfwd(t, scopeYAML(nsd), old)
	h3addr := d.http3Addr()
	get := func(c *http.Client) (*http.Response, error) {
		wire, _ := newQuery("www.e2e.test", dns.TypeA).Pack()
		res, err := c.Get("https://" + h3addr + "/dns-query?dns=" + base64.RawURLEncoding.EncodeToString(wire))
		if err == nil {
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
		return res, err
	}
	before := d.h3Client()
	res, err := get(before)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("before the reload: %v %v", res, err)
	}
	oldSerial := res.TLS.PeerCertificates[0].SerialNumber

	next := newPKI(t) // another CA, another key
	for _, f := range [][2]string{{next.Cert, old.Cert}, {next.Key, old.Key}} {
		b, err := os.ReadFile(f[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f[1]+".tmp", b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(f[1]+".tmp", f[1]); err != nil {
			t.Fatal(err)
		}
	}
	d.waitEvent(10*time.Second, func(ev map[string]any) bool { return ev["message"] == "certificate reloaded from files" })

	// The open connection: only the old CA is trusted, so an answer
	// proves no new handshake was made.
	res, err = get(before)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("the connection opened before the reload: %v %v", res, err)
	}
	if res.TLS.PeerCertificates[0].SerialNumber.Cmp(oldSerial) != 0 {
		t.Fatal("the open connection's certificate changed")
	}
	tr := &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: next.Pool}}
	t.Cleanup(func() { tr.Close() })
	res, err = get(&http.Client{Transport: tr, Timeout: 15 * time.Second})
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("a new connection after the reload, trusting the new CA: %v %v", res, err)
	}
	if !res.TLS.PeerCertificates[0].Equal(mustCert(t, next.Cert)) {
		t.Fatal("a new connection did not get the reloaded certificate")
	}
}

func mustCert(t *testing.T, file string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A QUIC connection's address counts like a TCP peer's:
// client_connections and connections close the HTTP/3 connections past
// them once their handshake is done (H3_EXCESSIVE_LOAD), and a closed
// connection frees its slot.
func TestHTTP3ConnectionLimits(t *testing.T) {
	t.Parallel()
	d := startDohfwd(t, limitsYAML("  client_connections: 2\n  connections: 3\n", "127.0.0.1:1"), newPKI(t))
	h3addr, err := net.ResolveUDPAddr("udp", d.http3Addr())
	if err != nil {
		t.Fatal(err)
	}
	dial := func(src string) (*quic.Conn, error) {
		pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(src)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := quic.Dial(ctx, pc, h3addr, &tls.Config{RootCAs: d.pki.Pool, ServerName: "localhost",
			NextProtos: []string{http3.NextProtoH3}}, nil)
		if err != nil {
			pc.Close()
			return nil, err
		}
		t.Cleanup(func() { c.CloseWithError(0, ""); pc.Close() })
		// A connection taken gets the server's HTTP/3 control stream
		// (its SETTINGS); one refused is closed instead.
		if _, err := c.AcceptUniStream(ctx); err != nil {
			return nil, err
		}
		return c, nil
	}
	mustDial := func(src string) *quic.Conn {
		c, err := dial(src)
		if err != nil {
			t.Fatalf("QUIC connection from %s refused: %v", src, err)
		}
		return c
	}
	a1 := mustDial("127.0.0.1")
	mustDial("127.0.0.1")
	var appErr *quic.ApplicationError
	if _, err := dial("127.0.0.1"); !errors.As(err, &appErr) || appErr.ErrorCode != 0x0107 {
		t.Fatalf("a third QUIC connection from one client: %v, want it closed with H3_EXCESSIVE_LOAD (0x107)", err)
	}
	mustDial("127.0.0.2")
	if _, err := dial("127.0.0.3"); err == nil {
		t.Fatal("a fourth connection in all was taken")
	}
	if v := d.metric("dohfwd_connections_open"); v != 3 {
		t.Errorf("dohfwd_connections_open %v, want 3", v)
	}
	a1.CloseWithError(0, "")
	deadline := time.Now().Add(5 * time.Second)
	for d.metric("dohfwd_connections_open") > 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	mustDial("127.0.0.1")
	if v := d.metric(`dohfwd_limit_refusals_total{limit="client_connections"}`); v != 1 {
		t.Errorf("client_connections refusals %v, want 1", v)
	}
	if v := d.metric(`dohfwd_limit_refusals_total{limit="connections"}`); v != 1 {
		t.Errorf("connections refusals %v, want 1", v)
	}
}

// AdGuard dnsproxy with dohfwd's HTTP/3 listener as its upstream
// (`-u h3://`), verifying the certificate against the test CA, answers
// plain DNS clients with what dohfwd's upstream knows, and dohfwd counts
// the requests under proto h3.
func TestDnsproxyOverHTTP3(t *testing.T) {
	t.Parallel()
	d := startDohfwd(t, scopeYAML(startNSD(t)), newPKI(t))
	askThroughDnsproxy(t, d, "h3://"+d.http3Addr()+"/dns-query")
	if n := d.metric(`dohfwd_doh_requests_total{proto="h3",rcode="NOERROR",status="200"}`); n < 2 {
		t.Errorf(`dohfwd_doh_requests_total{proto="h3",rcode="NOERROR",status="200"} = %v, want 2 or more`, n)
	}
	d.waitEvent(5*time.Second, func(ev map[string]any) bool {
		return ev["message"] == "question" && ev["qname"] == "v6.e2e.test." && ev["proto"] == "h3"
	})
}

// A client over client_qps gets 429 with Retry-After over HTTP/3 as over
// HTTP/2: the same admission, counted the same.
func TestHTTP3ClientOverItsRateGets429(t *testing.T) {
	t.Parallel()
	d := startDohfwd(t, limitsYAML("  client_qps: 1\n  client_burst: 1\n", startNSD(t)), newPKI(t))
	c := d.h3Client()
	wire, _ := newQuery("www.e2e.test", dns.TypeA).Pack()
	url := "https://" + d.http3Addr() + "/dns-query?dns=" + base64.RawURLEncoding.EncodeToString(wire)
	statuses := []int{}
	var retryAfter string
	for range 3 {
		res, err := c.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		statuses = append(statuses, res.StatusCode)
		if res.StatusCode == 429 {
			retryAfter = res.Header.Get("Retry-After")
		}
	}
	if statuses[0] != 200 || statuses[2] != 429 || retryAfter == "" {
		t.Fatalf("statuses %v, Retry-After %q: want 200 first, then 429 with Retry-After", statuses, retryAfter)
	}
	if v := d.metric(`dohfwd_limit_refusals_total{limit="client_qps"}`); v < 1 {
		t.Errorf("client_qps refusals %v, want at least 1", v)
	}
}

// SIGTERM answers the HTTP/3 questions in flight before dohfwd exits 0,
// as it does HTTP/2's.
func TestHTTP3SIGTERMDrainsInFlight(t *testing.T) {
	t.Parallel()
	slow := upstreamtest.Start(t, upstreamtest.Delay(800*time.Millisecond, upstreamtest.Answer("@ 60 IN A 192.0.2.9")))
	d := startDohfwd(t, scopeYAML(slow.String()), newPKI(t))
	c, base := d.h3Client(), "https://"+d.http3Addr()
	const n = 10
	var wg sync.WaitGroup
	errs := make(chan string, n)
	for i := range n {
		wg.Go(func() {
			wire, _ := newQuery(fmt.Sprintf("q%d.drain.test", i), dns.TypeA).Pack()
			res, err := c.Post(base+"/dns-query", "application/dns-message", bytes.NewReader(wire))
			if err != nil {
				errs <- fmt.Sprintf("q%d: %v", i, err)
				return
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			m := new(dns.Msg)
			if res.StatusCode != 200 || m.Unpack(body) != nil || len(m.Answer) != 1 {
				errs <- fmt.Sprintf("q%d: %d %v", i, res.StatusCode, m)
			}
		})
	}
	for end := time.Now().Add(5 * time.Second); len(slow.Queries()) < n && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	d.wantDrained(&wg, errs)
}

// silentConn is a client socket that sends what quic-go writes and reads
// what the server sends without ever handing it to quic-go: a client
// whose address never answers, as a spoofed one. It counts the bytes
// each way and the Retry packets received.
type silentConn struct {
	net.PacketConn
	sent, received, retries atomic.Int64
}

func (c *silentConn) WriteTo(b []byte, addr net.Addr) (int, error) {
	c.sent.Add(int64(len(b)))
	return c.PacketConn.WriteTo(b, addr)
}

func (c *silentConn) ReadFrom(b []byte) (int, net.Addr, error) {
	for {
		n, _, err := c.PacketConn.ReadFrom(b)
		if err != nil {
			return 0, nil, err
		}
		c.received.Add(int64(n))
		if n > 0 && b[0]&0x80 != 0 && (b[0]>>4)&3 == 3 { // long header, type Retry (QUIC v1)
			c.retries.Add(1)
		}
	}
}

// Handshakes from addresses that never answer: the server sends each at
// most three times the bytes it received (RFC 9000 §8), and once 64 of
// them are under way, new ones get a stateless Retry instead of a
// handshake (quicconf.Gate), so a flood of Initials from spoofed
// addresses holds no more state.
func TestHTTP3UnvalidatedHandshakesAreBounded(t *testing.T) {
	t.Parallel()
	d := startDohfwd(t, scopeYAML("127.0.0.1:1"), newPKI(t))
	addr, err := net.ResolveUDPAddr("udp", d.http3Addr())
	if err != nil {
		t.Fatal(err)
	}
	const n = 80
	conns := make([]*silentConn, n)
	var wg sync.WaitGroup
	for i := range conns {
		pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pc.Close() })
		conns[i] = &silentConn{PacketConn: pc}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			tr := &quic.Transport{Conn: conns[i]}
			defer tr.Close()
			if c, err := tr.Dial(ctx, addr, &tls.Config{RootCAs: d.pki.Pool, ServerName: "localhost",
				NextProtos: []string{http3.NextProtoH3}}, nil); err == nil {
				c.CloseWithError(0, "")
				t.Errorf("client %d: a handshake completed without the client reading a packet", i)
			}
		})
	}
	wg.Wait()
	retried := 0
	for i, c := range conns {
		if c.retries.Load() > 0 {
			retried++
			continue
		}
		if s, r := c.sent.Load(), c.received.Load(); r > 3*s {
			t.Errorf("client %d: sent %d bytes, the server answered %d: more than 3x before validation", i, s, r)
		}
	}
	if retried == 0 || retried > n-64 {
		t.Errorf("%d of %d unanswered handshakes got a Retry, want between 1 and %d (past 64 under way)", retried, n, n-64)
	}
	// Each Retry is counted, under h3; HTTP/3 has no DNS listener's
	// question count (its requests are dohfwd_doh_requests_total's).
	if v := d.metric(`dohfwd_quic_retries_total{transport="h3"}`); int(v) < retried {
		t.Errorf(`dohfwd_quic_retries_total{transport="h3"} = %v, %d clients saw a Retry`, v, retried)
	}
	if h3, _ := d.status()["transports"].(map[string]any)["h3"].(map[string]any); h3 == nil || h3["quic_retries"] == nil || h3["questions"] != nil {
		t.Errorf("/status transports.h3 = %v, want quic_retries and no questions", h3)
	}
}

// HTTP/3 is an upgrade: when another program holds the HTTPS port's UDP
// twin, dohfwd says so in its log and serves DoH over HTTP/2 as ever,
// advertising no Alt-Svc, rather than not starting.
func TestHTTP3PortTakenLeavesHTTP2Serving(t *testing.T) {
	t.Parallel()
	held, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	yaml := strings.Replace(scopeYAML(startNSD(t)), "https: 127.0.0.1:0", "https: "+held.LocalAddr().String(), 1)
	d := startDohfwd(t, yaml, newPKI(t))
	d.waitEvent(5*time.Second, func(ev map[string]any) bool {
		return ev["level"] == "error" && strings.HasPrefix(fmt.Sprint(ev["message"]), "HTTP/3 not served")
	})
	res, m := d.query(d.client(), newQuery("www.e2e.test", dns.TypeA))
	if res.StatusCode != 200 || m == nil || len(m.Answer) != 1 || res.ProtoMajor != 2 {
		t.Fatalf("DoH over HTTP/2 with HTTP/3's port taken: %v %v", res.Status, m)
	}
	if v := res.Header.Get("Alt-Svc"); v != "" {
		t.Errorf("Alt-Svc %q with no HTTP/3 served", v)
	}
}
