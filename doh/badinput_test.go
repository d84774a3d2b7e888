//go:build !wasip1

package doh

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// TestBadInputNeverReachesResolver sends every kind of bad request through
// a real HTTP/2-over-TLS server and checks the status, the Allow header
// where it applies, a body that says what is wrong, and that the resolver
// was never asked.
func TestBadInputNeverReachesResolver(t *testing.T) {
	res := &recordingResolver{}
	var seen exchanges
	base, c := startTLS(t, NewHandler(res, Options{Observe: seen.observe}), Limits{})
	u := base + DefaultPath

	good := pack(t, query(t, "example.org.", dns.TypeA, 0))
	resp := query(t, "example.org.", dns.TypeA, 0)
	resp.Response = true
	noQuestion := pack(t, &dns.Msg{})
	two := query(t, "example.org.", dns.TypeA, 0)
	two.Question = append(two.Question, two.Question[0])
	bad := []byte{0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xC0, 0x0C, 0, 1, 0, 1} // a name pointing at itself

	dnsCT := []string{"Content-Type", MediaTypeDNS}
	cases := []struct {
		name   string
		req    *http.Request
		status int
		allow  string
		says   string
	}{
		{"no dns parameter", newRequest(t, "GET", u, nil), 400, "", "missing dns parameter"},
		{"empty dns parameter", newRequest(t, "GET", u+"?dns=", nil), 400, "", "missing dns parameter"},
		{"bad base64url", newRequest(t, "GET", u+"?dns=!!!not*base64", nil), 400, "", "not base64url"},
		{"standard base64 alphabet", newRequest(t, "GET", u+"?dns="+strings.ReplaceAll(b64(good), "A", "/"), nil), 400, "", "bad dns parameter"},
		{"short message", newRequest(t, "GET", u+"?dns="+b64(good[:5]), nil), 400, "", "12-byte header"},
		{"response as query GET", newRequest(t, "GET", u+"?dns="+b64(pack(t, resp)), nil), 400, "", "QR set"},
		{"response as query POST", newRequest(t, "POST", u, pack(t, resp), dnsCT...), 400, "", "QR set"},
		{"QDCOUNT 0", newRequest(t, "GET", u+"?dns="+b64(noQuestion), nil), 400, "", "QDCOUNT is 0"},
		{"QDCOUNT 2", newRequest(t, "POST", u, pack(t, two), dnsCT...), 400, "", "QDCOUNT is 2"},
		{"undecodable question", newRequest(t, "POST", u, bad, dnsCT...), 400, "", "undecodable"},
		{"empty body", newRequest(t, "POST", u, []byte{}, dnsCT...), 400, "", "12-byte header"},
		{"body of 65536 bytes", newRequest(t, "POST", u, append(good, make([]byte, 65536-len(good))...), dnsCT...), 413, "", "too large"},
		{"body of 65536 bytes, no Content-Length", newRequest(t, "POST", u, nil, dnsCT...).WithContext(t.Context()), 413, "", "too large"},
		{"no content type", newRequest(t, "POST", u, good), 415, "", "Content-Type"},
		{"wrong content type", newRequest(t, "POST", u, good, "Content-Type", "application/octet-stream"), 415, "", "application/dns-message"},
		{"PUT", newRequest(t, "PUT", u, good, dnsCT...), 405, "GET, POST", "method not allowed"},
		{"DELETE", newRequest(t, "DELETE", u+"?dns="+b64(good), nil), 405, "GET, POST", "method not allowed"},
		{"HEAD", newRequest(t, "HEAD", u+"?dns="+b64(good), nil), 405, "GET, POST", ""},
		{"unknown path", newRequest(t, "GET", base+"/dns?dns="+b64(good), nil), 404, "", "not found"},
		{"root path", newRequest(t, "GET", base+"/", nil), 404, "", "/dns-query"},
		{"JSON POST", newRequest(t, "POST", base+JSONPath+"?name=example.org", nil), 405, "GET", "GET only"},
		{"JSON no name", newRequest(t, "GET", base+JSONPath, nil), 400, "", "missing name"},
		{"JSON bad name", newRequest(t, "GET", base+JSONPath+"?name=a..b", nil), 400, "", "bad name"},
		{"JSON long name", newRequest(t, "GET", base+JSONPath+"?name="+strings.Repeat("a.", 130), nil), 400, "", "bad name"},
		{"JSON bad type", newRequest(t, "GET", base+JSONPath+"?name=example.org&type=NOPE", nil), 400, "", "bad type"},
		{"JSON type 0", newRequest(t, "GET", base+JSONPath+"?name=example.org&type=0", nil), 400, "", "bad type"},
		{"JSON type 65536", newRequest(t, "GET", base+JSONPath+"?name=example.org&type=65536", nil), 400, "", "bad type"},
		{"JSON bad do", newRequest(t, "GET", base+JSONPath+"?name=example.org&do=maybe", nil), 400, "", "bad do"},
		{"JSON bad cd", newRequest(t, "GET", base+JSONPath+"?name=example.org&cd=2", nil), 400, "", "bad cd"},
		{"JSON by Accept, no name", newRequest(t, "GET", u, nil, "Accept", MediaTypeJSON), 400, "", "missing name"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.req.Body == nil && tc.status == 413 {
				// A body of unknown length (HTTP/2 DATA frames without a
				// content-length): the server must count, not trust.
				tc.req.Body = io.NopCloser(io.MultiReader(bytes.NewReader(good), bytes.NewReader(make([]byte, 65536))))
				tc.req.ContentLength = -1
			}
			r, body := do(t, c, tc.req)
			if r.ProtoMajor != 2 {
				t.Errorf("protocol %s, want HTTP/2", r.Proto)
			}
			if r.StatusCode != tc.status {
				t.Errorf("status %d, want %d (body %q)", r.StatusCode, tc.status, body)
			}
			if got := r.Header.Get("Allow"); got != tc.allow {
				t.Errorf("Allow %q, want %q", got, tc.allow)
			}
			if !strings.Contains(string(body), tc.says) {
				t.Errorf("body %q does not say %q", body, tc.says)
			}
			if r.Header.Get("Cache-Control") != "no-store" {
				t.Errorf("Cache-Control %q on an error, want no-store", r.Header.Get("Cache-Control"))
			}
			x := seen.last(t)
			if x.Status != tc.status || x.Resolved || x.Problem == "" || x.Rcode != -1 {
				t.Errorf("Observe saw status %d resolved %v problem %q rcode %d", x.Status, x.Resolved, x.Problem, x.Rcode)
			}
		})
	}
	if n := res.calls.Load(); n != 0 {
		t.Fatalf("the resolver was asked %d times for bad input", n)
	}

	// The server still answers a good query afterwards.
	r, body := do(t, c, newRequest(t, "GET", u+"?dns="+b64(good), nil))
	if r.StatusCode != 200 || res.calls.Load() != 1 {
		t.Fatalf("good query after the bad ones: status %d, %d calls, body %q", r.StatusCode, res.calls.Load(), body)
	}
}

// TestDNSErrorsAnsweredHere covers queries that parse but are answered
// with a DNS error (HTTP 200) without asking the resolver.
func TestDNSErrorsAnsweredHere(t *testing.T) {
	res := &recordingResolver{}
	var seen exchanges
	base, c := startTLS(t, NewHandler(res, Options{Observe: seen.observe}), Limits{})
	u := base + DefaultPath

	notify := query(t, "example.org.", dns.TypeSOA, 77)
	notify.Opcode = dns.OpcodeNotify
	update := new(dns.Msg)
	update.SetUpdate("example.org.")
	update.Id = 78
	withAnswer := query(t, "example.org.", dns.TypeA, 79)
	rr, _ := dns.NewRR("example.org. 60 IN A 192.0.2.1")
	withAnswer.Answer = append(withAnswer.Answer, rr)
	twoOPT := query(t, "example.org.", dns.TypeA, 80)
	twoOPT.SetEdns0(1232, false)
	twoOPT.Extra = append(twoOPT.Extra, &dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT, Class: 512}})
	ednsV1 := query(t, "example.org.", dns.TypeA, 81)
	ednsV1.SetEdns0(1232, false)
	ednsV1.IsEdns0().SetVersion(1)
	axfr := query(t, "example.org.", dns.TypeAXFR, 82)
	// Header and question are fine; the additional section is cut short.
	truncatedExtra := pack(t, query(t, "example.org.", dns.TypeA, 83))
	truncatedExtra[11] = 1 // ARCOUNT 1, no record follows ... plus a stray byte:
	truncatedExtra = append(truncatedExtra, 0)

	cases := []struct {
		name  string
		wire  []byte
		id    uint16
		rcode int
	}{
		{"NOTIFY opcode", pack(t, notify), 77, dns.RcodeNotImplemented},
		{"UPDATE opcode", pack(t, update), 78, dns.RcodeNotImplemented},
		{"records in answer section", pack(t, withAnswer), 79, dns.RcodeFormatError},
		{"two OPT records", pack(t, twoOPT), 80, dns.RcodeFormatError},
		{"EDNS version 1", pack(t, ednsV1), 81, dns.RcodeBadVers},
		{"AXFR", pack(t, axfr), 82, dns.RcodeNotImplemented},
		{"malformed additional section", truncatedExtra, 83, dns.RcodeFormatError},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, body := do(t, c, newRequest(t, "POST", u, tc.wire, "Content-Type", MediaTypeDNS))
			if r.StatusCode != 200 || r.Header.Get("Content-Type") != MediaTypeDNS {
				t.Fatalf("status %d type %q, want 200 %s (body %q)", r.StatusCode, r.Header.Get("Content-Type"), MediaTypeDNS, body)
			}
			m := new(dns.Msg)
			if err := m.Unpack(body); err != nil {
				t.Fatalf("answer does not unpack: %v", err)
			}
			if m.Rcode != tc.rcode || m.Id != tc.id || !m.Response {
				t.Errorf("rcode %s id %d QR %v, want %s id %d QR set", dns.RcodeToString[m.Rcode], m.Id, m.Response, dns.RcodeToString[tc.rcode], tc.id)
			}
			if r.Header.Get("Cache-Control") != "no-store" {
				t.Errorf("Cache-Control %q, want no-store", r.Header.Get("Cache-Control"))
			}
			if x := seen.last(t); x.Resolved || x.Rcode != tc.rcode || x.Problem == "" {
				t.Errorf("Observe saw resolved %v rcode %d problem %q", x.Resolved, x.Rcode, x.Problem)
			}
		})
	}
	if n := res.calls.Load(); n != 0 {
		t.Fatalf("the resolver was asked %d times", n)
	}
}

// TestBodyLimitBoundary: a query of exactly 65535 bytes (a padded one) is
// answered (one byte more is 413: see the bad-input matrix).
func TestBodyLimitBoundary(t *testing.T) {
	t.Parallel()
	res := &recordingResolver{}
	base, c := startTLS(t, NewHandler(res, Options{}), Limits{})
	q := query(t, "example.org.", dns.TypeA, 3)
	q.SetEdns0(1232, false)
	pad := &dns.EDNS0_PADDING{}
	q.IsEdns0().Option = append(q.IsEdns0().Option, pad)
	pad.Padding = make([]byte, MaxMessageSize-len(pack(t, q)))
	wire := pack(t, q)
	if len(wire) != MaxMessageSize {
		t.Fatalf("query of %d bytes", len(wire))
	}
	r, body := do(t, c, newRequest(t, "POST", base+DefaultPath, wire, "Content-Type", MediaTypeDNS))
	if r.StatusCode != 200 || res.calls.Load() != 1 {
		t.Fatalf("65535 bytes: status %d, %d calls, %q", r.StatusCode, res.calls.Load(), body[:min(len(body), 80)])
	}
}
