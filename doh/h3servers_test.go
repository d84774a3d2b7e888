//go:build !wasip1

package doh

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/quic-go/quic-go/http3"

	"github.com/dohfwd/dohfwd/doh/metrics"
	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
)

// h3Side is one HTTP/3 server of the differential test: its own engine
// (so both see the same cache states), observer and counters.
type h3Side struct {
	name    string
	seen    *exchanges
	metrics *metrics.Metrics
	client  *http.Client
	base    string
}

// startH3Side serves a handler over a real engine on a loopback UDP
// socket, on quic-go's streams directly (direct) or through quic-go's
// http3.Server.
func startH3Side(t *testing.T, up string, direct bool) *h3Side {
	t.Helper()
	e, err := engine.New(engine.Config{FallbackServers: []string{up}}, engine.Options{Network: engine.NativeNetwork{}})
	if err != nil {
		t.Fatal(err)
	}
	side := &h3Side{name: "http3.Server", seen: &exchanges{}, metrics: metrics.NewMetrics()}
	h := NewHandler(e, Options{Observe: func(x Exchange) {
		side.seen.observe(x)
		side.metrics.ObserveRequest("h3", x.Status, x.Rcode)
	}, ServerTiming: true})
	h.SetAltSvc(4433, false)
	var dh *Handler
	if direct {
		side.name, dh = "direct", h
	}
	cert, pool := testCert()
	srv := newH3Server(h, dh, &tls.Config{Certificates: []tls.Certificate{cert}}, Limits{}, H3Options{})
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(pc)
	t.Cleanup(func() { srv.Close() })
	tr := &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	t.Cleanup(func() { tr.Close() })
	side.client = &http.Client{Transport: tr, Timeout: 10 * time.Second}
	side.base = "https://" + pc.LocalAddr().String()
	return side
}

// The direct HTTP/3 path (h3conn.go) and quic-go's http3.Server in front
// of ServeHTTP give the same answers (status, headers, body), the same
// observed exchanges (what the log events and counters are made of)
// and the same request counters, for every kind of request: GET, POST,
// JSON, DNS errors made here, every HTTP error status, a miss and then
// its hit.
func TestH3ServersAgree(t *testing.T) {
	up := upstreamtest.Start(t, zone)
	direct, old := startH3Side(t, up.String(), true), startH3Side(t, up.String(), false)

	wire := func(name string, qtype uint16, id uint16) []byte { return pack(t, query(t, name, qtype, id)) }
	resp := query(t, "www.example.test.", dns.TypeA, 0)
	resp.Response = true
	badClass := query(t, "www.example.test.", dns.TypeA, 0)
	badClass.Question[0].Qclass = dns.ClassCHAOS
	rows := []struct {
		name, method, target, ctype, accept string
		body                                []byte
	}{
		{"GET miss", "GET", "/dns-query?dns=" + b64(wire("www.example.test.", dns.TypeA, 0)), "", MediaTypeDNS, nil},
		{"GET hit", "GET", "/dns-query?dns=" + b64(wire("www.example.test.", dns.TypeA, 0)), "", MediaTypeDNS, nil},
		{"POST", "POST", "/dns-query", MediaTypeDNS, "", wire("web.example.test.", dns.TypeA, 7)},
		{"POST NXDOMAIN", "POST", "/dns-query", MediaTypeDNS, "", wire("nope.example.test.", dns.TypeA, 0)},
		{"SERVFAIL", "POST", "/dns-query", MediaTypeDNS, "", wire("fail.example.test.", dns.TypeA, 0)},
		{"NODATA", "GET", "/dns-query?dns=" + b64(wire("www.example.test.", dns.TypeAAAA, 0)), "", "", nil},
		{"big", "GET", "/dns-query?dns=" + b64(wire("big.example.test.", dns.TypeTXT, 0)), "", "", nil},
		{"JSON", "GET", "/resolve?name=www.example.test&type=A", "", "", nil},
		{"JSON on the DoH path", "GET", "/dns-query?name=web.example.test", "", "application/dns-json", nil},
		{"CHAOS class", "POST", "/dns-query", MediaTypeDNS, "", pack(t, badClass)},
		{"a response", "POST", "/dns-query", MediaTypeDNS, "", pack(t, resp)},
		{"no dns parameter", "GET", "/dns-query", "", "", nil},
		{"bad base64", "GET", "/dns-query?dns=!!!", "", "", nil},
		{"PUT", "PUT", "/dns-query", MediaTypeDNS, "", wire("www.example.test.", dns.TypeA, 0)},
		{"HEAD", "HEAD", "/dns-query?dns=" + b64(wire("www.example.test.", dns.TypeA, 0)), "", "", nil},
		{"too large", "POST", "/dns-query", MediaTypeDNS, "", make([]byte, 70000)},
		{"wrong media type", "POST", "/dns-query", "text/plain", "", wire("www.example.test.", dns.TypeA, 0)},
		{"short", "POST", "/dns-query", MediaTypeDNS, "", []byte{0, 1, 2}},
		{"other path", "GET", "/nope", "", "", nil},
		{"long URI", "GET", "/dns-query?dns=" + strings.Repeat("A", 90000), "", "", nil},
	}
	for _, r := range rows {
		var got [2]h3Answer
		for i, side := range []*h3Side{direct, old} {
			got[i] = side.ask(t, r.method, r.target, r.ctype, r.accept, r.body)
		}
		if d := got[0].diff(got[1]); d != "" {
			t.Errorf("%s: direct and http3.Server differ:\n%s", r.name, d)
		}
		if got[0].status == 0 {
			t.Errorf("%s: no answer", r.name)
		}
	}
	// The exchanges observed, one per request, in order.
	a, b := direct.exchanges(), old.exchanges()
	if len(a) != len(b) {
		t.Fatalf("%d exchanges observed on the direct path, %d through http3.Server", len(a), len(b))
	}
	for i := range a {
		if !reflect.DeepEqual(a[i], b[i]) {
			t.Errorf("exchange %d differs:\ndirect:       %+v\nhttp3.Server: %+v", i, a[i], b[i])
		}
	}
	if len(a) < len(rows)-1 {
		t.Errorf("%d exchanges for %d requests", len(a), len(rows))
	}
	// The request counters.
	var ca, cb bytes.Buffer
	for _, m := range []struct {
		m *metrics.Metrics
		b *bytes.Buffer
	}{{direct.metrics, &ca}, {old.metrics, &cb}} {
		n, err := testutil.GatherAndCount(m.m.Registry, "dohfwd_doh_requests_total")
		if err != nil || n == 0 {
			t.Fatalf("counters: %d, %v", n, err)
		}
		mfs, _ := m.m.Registry.Gather()
		for _, mf := range mfs {
			if mf.GetName() != "dohfwd_doh_requests_total" {
				continue
			}
			for _, c := range mf.GetMetric() {
				for _, l := range c.GetLabel() {
					fmt.Fprintf(m.b, "%s=%q ", l.GetName(), l.GetValue())
				}
				fmt.Fprintf(m.b, "%v\n", c.GetCounter().GetValue())
			}
		}
	}
	if ca.String() != cb.String() {
		t.Errorf("request counters differ:\ndirect:       %s\nhttp3.Server: %s", ca.String(), cb.String())
	}
}

// h3Answer is what a client saw of one request.
type h3Answer struct {
	status int
	header http.Header
	body   []byte
	err    string
}

func (s *h3Side) ask(t *testing.T, method, target, ctype, accept string, body []byte) h3Answer {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, s.base+target, rd)
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	res, err := s.client.Do(req)
	if err != nil {
		return h3Answer{err: err.Error()}
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return h3Answer{err: "body: " + err.Error()}
	}
	return h3Answer{status: res.StatusCode, header: res.Header, body: zeroTTLs(res.Header.Get("Content-Type"), b)}
}

var ttlJSON = regexp.MustCompile(`"TTL":\d+`)
var maxAgeValue = regexp.MustCompile(`max-age=\d+`)

// zeroTTLs is body with its TTLs zeroed: the second side asks a second
// later, so its TTLs may be a second less.
func zeroTTLs(ctype string, body []byte) []byte {
	switch ctype {
	case MediaTypeDNS:
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
	case MediaTypeJSON:
		return ttlJSON.ReplaceAll(body, []byte(`"TTL":0`))
	}
	return body
}

// diff says how a and b differ, but for what changes from one request
// to the next (Date, the timing, max-age).
func (a h3Answer) diff(b h3Answer) string {
	var out strings.Builder
	if a.status != b.status || a.err != b.err {
		fmt.Fprintf(&out, "  status %d %q vs %d %q\n", a.status, a.err, b.status, b.err)
	}
	for _, k := range unionKeys(a.header, b.header) {
		if k == "Date" || k == "Server-Timing" {
			continue
		}
		va, vb := strings.Join(a.header[k], ", "), strings.Join(b.header[k], ", ")
		if k == "Cache-Control" {
			va, vb = maxAgeValue.ReplaceAllString(va, "max-age=N"), maxAgeValue.ReplaceAllString(vb, "max-age=N")
		}
		if va != vb {
			fmt.Fprintf(&out, "  %s: %q vs %q\n", k, va, vb)
		}
	}
	if !bytes.Equal(a.body, b.body) {
		fmt.Fprintf(&out, "  body %q\n    vs %q\n", a.body, b.body)
	}
	return out.String()
}

func unionKeys(a, b http.Header) []string {
	var keys []string
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	return keys
}

// exchanges are the side's observed exchanges with what differs between
// any two requests left out: times, the client's port, the question's id.
func (s *h3Side) exchanges() []Exchange {
	s.seen.mu.Lock()
	defer s.seen.mu.Unlock()
	out := make([]Exchange, len(s.seen.list))
	for i, x := range s.seen.list {
		x.Start, x.Duration, x.Trace = time.Time{}, 0, engine.Trace{}
		x.Peer = netip.AddrPortFrom(x.Peer.Addr(), 0)
		r := &x.Response
		r.Wire, r.Question, r.Upstream, r.Answered, r.TTL = nil, 0, 0, time.Time{}, 0
		out[i] = x
	}
	return out
}
