//go:build !wasip1

package doh

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
	"github.com/miekg/dns"
)

// zone is the test upstream: a real DNS server on loopback UDP and TCP
// that knows a few names.
func zone(q upstreamtest.Query) upstreamtest.Action {
	if q.Msg == nil {
		return upstreamtest.Action{}
	}
	name := strings.ToLower(q.Msg.Question[0].Name)
	rr := func(s string) dns.RR {
		r, err := dns.NewRR(s)
		if err != nil {
			panic(err)
		}
		return r
	}
	soa := rr("example.test. 900 IN SOA ns.example.test. admin.example.test. 1 7200 3600 1209600 300")
	m := upstreamtest.ReplyTo(q.Msg, dns.RcodeSuccess)
	switch {
	case name == "www.example.test." && q.Msg.Question[0].Qtype == dns.TypeA:
		m.Answer = append(m.Answer, rr(name+" 300 IN A 192.0.2.1"), rr(name+" 60 IN A 192.0.2.2"))
		m.Ns = append(m.Ns, rr("example.test. 3600 IN NS ns.example.test."))
	case name == "web.example.test." && q.Msg.Question[0].Qtype == dns.TypeA:
		m.Answer = append(m.Answer, rr(name+" 30 IN A 127.0.0.1"))
	case name == "www.example.test." || name == "web.example.test.": // NODATA: SOA TTL 900, MINIMUM 300
		m.Ns = append(m.Ns, soa)
	case name == "short.example.test.": // NODATA where the SOA TTL is the smaller
		m.Ns = append(m.Ns, rr("example.test. 42 IN SOA ns.example.test. admin.example.test. 1 7200 3600 1209600 300"))
	case name == "big.example.test.":
		for i := range 12 {
			m.Answer = append(m.Answer, rr(fmt.Sprintf(`%s 120 IN TXT "record %02d %s"`, name, i, strings.Repeat("x", 60))))
		}
	case name == "fail.example.test.":
		m.Rcode = dns.RcodeServerFailure
	default:
		m.Rcode = dns.RcodeNameError
		m.Ns = append(m.Ns, soa)
	}
	return upstreamtest.Action{Replies: []upstreamtest.Reply{{Msg: m}}}
}

// startEngine runs the real engine (native sockets) against the test
// upstream, behind a real HTTP/2 TLS server.
func startEngine(t *testing.T) (*engine.Engine, string, *http.Client, *exchanges) {
	t.Helper()
	up := upstreamtest.Start(t, zone)
	e, err := engine.New(engine.Config{FallbackServers: []string{up.String()}}, engine.Options{Network: engine.NativeNetwork{}})
	if err != nil {
		t.Fatal(err)
	}
	var seen exchanges
	base, c := startTLS(t, NewHandler(e, Options{Observe: seen.observe}), Limits{})
	return e, base, c, &seen
}

func unpackAnswer(t *testing.T, r *http.Response, body []byte) *dns.Msg {
	t.Helper()
	if r.StatusCode != 200 {
		t.Fatalf("status %d, body %q", r.StatusCode, body)
	}
	if ct := r.Header.Get("Content-Type"); ct != MediaTypeDNS {
		t.Fatalf("Content-Type %q", ct)
	}
	if cl := r.Header.Get("Content-Length"); cl != strconv.Itoa(len(body)) {
		t.Fatalf("Content-Length %q for a body of %d bytes", cl, len(body))
	}
	m := new(dns.Msg)
	if err := m.Unpack(body); err != nil {
		t.Fatalf("answer does not unpack: %v", err)
	}
	return m
}

func TestGetPostAndJSONThroughEngine(t *testing.T) {
	t.Parallel()
	_, base, c, seen := startEngine(t)
	u := base + DefaultPath

	t.Run("GET keeps ID 0", func(t *testing.T) {
		q := query(t, "www.example.test.", dns.TypeA, 0)
		r, body := do(t, c, newRequest(t, "GET", u+"?dns="+b64(pack(t, q)), nil, "Accept", MediaTypeDNS))
		m := unpackAnswer(t, r, body)
		if m.Id != 0 || m.Rcode != dns.RcodeSuccess || len(m.Answer) != 2 {
			t.Fatalf("answer: %v", m)
		}
		if r.Header.Get("Vary") != "Accept" {
			t.Errorf("Vary %q, want Accept", r.Header.Get("Vary"))
		}
		x := seen.last(t)
		if !x.Resolved || x.Status != 200 || x.Rcode != 0 || x.QName != "www.example.test." || x.Format != FormatWire || x.Proto != "HTTP/2.0" {
			t.Errorf("Observe saw %+v", x)
		}
	})
	t.Run("GET with padded base64url", func(t *testing.T) {
		q := query(t, "www.example.test.", dns.TypeA, 0)
		param := b64(pack(t, q))
		for len(param)%4 != 0 {
			param += "="
		}
		r, body := do(t, c, newRequest(t, "GET", u+"?dns="+param, nil))
		if m := unpackAnswer(t, r, body); len(m.Answer) != 2 {
			t.Fatalf("answer: %v", m)
		}
	})
	t.Run("POST restores ID", func(t *testing.T) {
		q := query(t, "www.example.test.", dns.TypeA, 0xBEEF)
		r, body := do(t, c, newRequest(t, "POST", u, pack(t, q), "Content-Type", MediaTypeDNS))
		m := unpackAnswer(t, r, body)
		if m.Id != 0xBEEF || len(m.Answer) != 2 {
			t.Fatalf("answer: %v", m)
		}
	})
	t.Run("JSON at /resolve", func(t *testing.T) {
		r, body := do(t, c, newRequest(t, "GET", base+JSONPath+"?name=www.example.test&type=a", nil))
		var j map[string]any
		if err := json.Unmarshal(body, &j); err != nil || r.StatusCode != 200 {
			t.Fatalf("status %d body %q: %v", r.StatusCode, body, err)
		}
		if r.Header.Get("Content-Type") != MediaTypeJSON || r.Header.Get("Cache-Control") != "max-age=60" {
			t.Errorf("headers %v", r.Header)
		}
		for _, k := range []string{"Status", "TC", "RD", "RA", "AD", "CD", "Question", "Answer", "Authority"} {
			if _, ok := j[k]; !ok {
				t.Errorf("JSON lacks %q: %s", k, body)
			}
		}
		var typed jsonMessage
		json.Unmarshal(body, &typed)
		want := jsonRecord{Name: "www.example.test.", Type: 1, TTL: 300, Data: "192.0.2.1"}
		if typed.Status != 0 || !typed.RD || !typed.RA || len(typed.Answer) != 2 || typed.Answer[0] != want ||
			typed.Question[0] != (jsonQuestion{Name: "www.example.test.", Type: 1}) || typed.Authority[0].Data != "ns.example.test." {
			t.Errorf("JSON %s", body)
		}
		if x := seen.last(t); x.Format != FormatJSON || x.Status != 200 || !x.Resolved {
			t.Errorf("Observe saw %+v", x)
		}
	})
	t.Run("JSON by Accept with numeric type", func(t *testing.T) {
		r, body := do(t, c, newRequest(t, "GET", u+"?name=nothere.example.test&type=28", nil, "Accept", MediaTypeJSON))
		var typed jsonMessage
		if err := json.Unmarshal(body, &typed); err != nil || r.StatusCode != 200 {
			t.Fatalf("status %d body %q: %v", r.StatusCode, body, err)
		}
		if typed.Status != dns.RcodeNameError || typed.Question[0].Type != dns.TypeAAAA || len(typed.Authority) != 1 || typed.Authority[0].Type != dns.TypeSOA {
			t.Errorf("JSON %s", body)
		}
		if r.Header.Get("Cache-Control") != "max-age=300" || r.Header.Get("Vary") != "Accept" {
			t.Errorf("headers %v", r.Header)
		}
	})
	t.Run("JSON do and cd", func(t *testing.T) {
		r, body := do(t, c, newRequest(t, "GET", base+JSONPath+"?name=www.example.test&do=1&cd=true", nil))
		var typed jsonMessage
		if err := json.Unmarshal(body, &typed); err != nil || r.StatusCode != 200 {
			t.Fatalf("status %d body %q: %v", r.StatusCode, body, err)
		}
		if !typed.CD {
			t.Errorf("CD not echoed: %s", body)
		}
	})
	t.Run("JSON SERVFAIL carries the EDE", func(t *testing.T) {
		r, body := do(t, c, newRequest(t, "GET", base+JSONPath+"?name=fail.example.test", nil))
		var typed jsonMessage
		if err := json.Unmarshal(body, &typed); err != nil || r.StatusCode != 200 {
			t.Fatalf("status %d body %q: %v", r.StatusCode, body, err)
		}
		if typed.Status != dns.RcodeServerFailure || !strings.Contains(typed.Comment, "No Reachable Authority") || r.Header.Get("Cache-Control") != "no-store" {
			t.Errorf("JSON %s, Cache-Control %q", body, r.Header.Get("Cache-Control"))
		}
	})
}

func TestCacheControl(t *testing.T) {
	t.Parallel()
	_, base, c, _ := startEngine(t)
	cases := []struct {
		name  string
		qtype uint16
		want  string
	}{
		{"www.example.test.", dns.TypeA, "max-age=60"},     // smallest TTL of answer and authority
		{"www.example.test.", dns.TypeAAAA, "max-age=300"}, // NODATA: min(SOA TTL 900, MINIMUM 300)
		{"short.example.test.", dns.TypeA, "max-age=42"},   // NODATA: SOA TTL below MINIMUM
		{"gone.example.test.", dns.TypeA, "max-age=300"},   // NXDOMAIN
		{"fail.example.test.", dns.TypeA, "no-store"},      // SERVFAIL (the engine's unavailable)
	}
	for _, tc := range cases {
		q := query(t, tc.name, tc.qtype, 1)
		r, body := do(t, c, newRequest(t, "POST", base+DefaultPath, pack(t, q), "Content-Type", MediaTypeDNS))
		m := unpackAnswer(t, r, body)
		if got := r.Header.Get("Cache-Control"); got != tc.want {
			t.Errorf("%s %s (%s): Cache-Control %q, want %q", tc.name, dns.TypeToString[tc.qtype], dns.RcodeToString[m.Rcode], got, tc.want)
		}
	}
}

func TestPaddingThroughEngine(t *testing.T) {
	t.Parallel()
	_, base, c, _ := startEngine(t)
	for _, name := range []string{"www.example.test.", "big.example.test.", "gone.example.test.", "fail.example.test."} {
		for _, padded := range []bool{true, false} {
			q := query(t, name, dns.TypeA, 0x1234)
			if padded {
				q.SetEdns0(1232, false)
				q.IsEdns0().Option = append(q.IsEdns0().Option, &dns.EDNS0_PADDING{Padding: make([]byte, 100)})
			}
			r, body := do(t, c, newRequest(t, "POST", base+DefaultPath, pack(t, q), "Content-Type", MediaTypeDNS))
			m := unpackAnswer(t, r, body)
			if m.Id != 0x1234 {
				t.Errorf("%s: ID %d", name, m.Id)
			}
			hasPadding := false
			if o := m.IsEdns0(); o != nil {
				for _, e := range o.Option {
					hasPadding = hasPadding || e.Option() == dns.EDNS0PADDING
				}
			}
			if padded && (len(body)%PaddingBlock != 0 || !hasPadding) {
				t.Errorf("%s: padded query, answer of %d bytes (padding option %v), want a multiple of %d", name, len(body), hasPadding, PaddingBlock)
			}
			if !padded && hasPadding {
				t.Errorf("%s: query without padding got a padded answer", name)
			}
			if name == "big.example.test." && len(m.Answer) != 12 {
				t.Errorf("big answer lost records: %d", len(m.Answer))
			}
		}
	}
}

func TestH2CPlainServer(t *testing.T) {
	t.Parallel()
	res := &recordingResolver{}
	base := startPlain(t, NewHandler(res, Options{}))
	q := pack(t, query(t, "example.org.", dns.TypeA, 9))
	for _, tc := range []struct {
		name   string
		client *http.Client
		major  int
	}{
		{"h2c prior knowledge", h2cClient(t), 2},
		{"HTTP/1.1", &http.Client{}, 1},
	} {
		r, body := do(t, tc.client, newRequest(t, "POST", base+DefaultPath, q, "Content-Type", MediaTypeDNS))
		if r.ProtoMajor != tc.major {
			t.Errorf("%s: protocol %s", tc.name, r.Proto)
		}
		m := unpackAnswer(t, r, body)
		if m.Id != 9 || len(m.Answer) != 1 {
			t.Errorf("%s: answer %v", tc.name, m)
		}
	}
}

// TestCacheControlLargeTTLs checks the values kept for TTLs over 300
// seconds: right for TTLs that share a slot, and made without allocating
// when a TTL repeats.
func TestCacheControlLargeTTLs(t *testing.T) {
	for _, s := range []uint32{301, 3600, 3600 + 64, 86400, 3600, 2147483647, 301 + 64*1000} {
		if got, want := cacheControlValue(s, true), "max-age="+strconv.FormatUint(uint64(s), 10); got != want {
			t.Errorf("TTL %d: %q, want %q", s, got, want)
		}
	}
	if got := cacheControlValue(3600, false); got != "no-store" {
		t.Errorf("not cacheable: %q", got)
	}
	cacheControlValue(86400, true)
	if n := testing.AllocsPerRun(100, func() { cacheControlValue(86400, true) }); n != 0 {
		t.Errorf("a repeated TTL allocates %v times", n)
	}
}

// TestAcceptsJSONInAnyCase: the JSON media type is found in Accept
// whatever the case of its letters, among other types.
func TestAcceptsJSONInAnyCase(t *testing.T) {
	for v, want := range map[string]bool{
		"application/dns-json": true, "Application/DNS-JSON": true, "text/html, application/dns-json;q=0.9": true,
		"application/dns-message": false, "application/dns-jso": false, "": false, "application/json": false,
	} {
		if got := acceptsJSON(Header{{"accept", v}}); got != want {
			t.Errorf("Accept %q: %v, want %v", v, got, want)
		}
	}
}

// missCounter is the real engine, counting how misses are asked.
type missCounter struct {
	*engine.Engine
	wire, miss atomic.Int64
}

func (m *missCounter) Resolve(ctx context.Context, query, dst []byte) engine.Response {
	m.wire.Add(1)
	return m.Engine.Resolve(ctx, query, dst)
}

func (m *missCounter) ResolveMiss(ctx context.Context, miss *engine.Miss, dst []byte) engine.Response {
	m.miss.Add(1)
	return m.Engine.ResolveMiss(ctx, miss, dst)
}

// TestHTTP2HandsTheMissOn: a wire query the resolver could not answer at
// once is asked with ResolveMiss, with what the immediate call read,
// and answered as Resolve would; a JSON query (not asked at once)
// takes Resolve.
func TestHTTP2HandsTheMissOn(t *testing.T) {
	t.Parallel()
	up := upstreamtest.Start(t, zone)
	e, err := engine.New(engine.Config{FallbackServers: []string{up.String()}}, engine.Options{Network: engine.NativeNetwork{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	res := &missCounter{Engine: e}
	base, c := startTLS(t, NewHandler(res, Options{}), Limits{})

	for i, name := range []string{"www.example.test.", "nx.example.test.", "WWW.Example.Test."} {
		q := query(t, name, dns.TypeA, uint16(100+i))
		r, body := do(t, c, newRequest(t, "POST", base+DefaultPath, pack(t, q), "Content-Type", MediaTypeDNS))
		m := unpackAnswer(t, r, body)
		if m.Id != uint16(100+i) || m.Question[0].Name != name || (name == "nx.example.test.") != (m.Rcode == dns.RcodeNameError) {
			t.Fatalf("%s: answer %v", name, m)
		}
	}
	if w, m := res.wire.Load(), res.miss.Load(); w != 0 || m != 3 {
		t.Errorf("wire queries: %d by Resolve, %d by ResolveMiss; want 0 and 3", w, m)
	}
	r, body := do(t, c, newRequest(t, "GET", base+JSONPath+"?name=www.example.test&type=a", nil))
	if r.StatusCode != 200 {
		t.Fatalf("JSON: status %d body %q", r.StatusCode, body)
	}
	if w, m := res.wire.Load(), res.miss.Load(); w != 1 || m != 3 {
		t.Errorf("after a JSON query: %d by Resolve, %d by ResolveMiss; want 1 and 3", w, m)
	}
}
