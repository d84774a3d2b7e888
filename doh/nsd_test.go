//go:build !wasip1

package doh

import (
	"bytes"
	"testing"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
	"github.com/miekg/dns"
)

// startNSD runs nsd, a real authoritative server from Debian, for zone
// example.test. on 127.0.0.1 until the test ends and returns its address.
func startNSD(t *testing.T) string {
	t.Helper()
	return upstreamtest.StartNSD(t, upstreamtest.Zone{Origin: "example.test.", Text: `$ORIGIN example.test.
$TTL 300
@    3600 IN SOA ns admin 1 3600 600 86400 120
@    IN NS ns
ns   IN A 127.0.0.1
www  IN A 192.0.2.80
www  90 IN A 192.0.2.81
`})
}

// TestHappyPathWithNSD: GET, POST and JSON through the real engine to nsd,
// with Cache-Control from nsd's own TTLs and negative answers.
func TestHappyPathWithNSD(t *testing.T) {
	t.Parallel()
	addr := startNSD(t)
	e, err := engine.New(engine.Config{FallbackServers: []string{addr}}, engine.Options{Network: engine.NativeNetwork{}})
	if err != nil {
		t.Fatal(err)
	}
	base, c := startTLS(t, NewHandler(e, Options{}), Limits{})
	u := base + DefaultPath

	r, body := do(t, c, newRequest(t, "GET", u+"?dns="+b64(pack(t, query(t, "www.example.test.", dns.TypeA, 0))), nil))
	m := unpackAnswer(t, r, body)
	if m.Id != 0 || len(m.Answer) != 2 || r.Header.Get("Cache-Control") != "max-age=90" {
		t.Errorf("GET www A: Cache-Control %q, %v", r.Header.Get("Cache-Control"), m)
	}

	q := query(t, "nope.example.test.", dns.TypeA, 0x4242)
	q.SetEdns0(1232, false)
	q.IsEdns0().Option = append(q.IsEdns0().Option, &dns.EDNS0_PADDING{Padding: make([]byte, 64)})
	r, body = do(t, c, newRequest(t, "POST", u, pack(t, q), "Content-Type", MediaTypeDNS))
	m = unpackAnswer(t, r, body)
	// NXDOMAIN: min(SOA TTL 3600, MINIMUM 120).
	if m.Id != 0x4242 || m.Rcode != dns.RcodeNameError || r.Header.Get("Cache-Control") != "max-age=120" || len(body)%PaddingBlock != 0 {
		t.Errorf("POST nope A: Cache-Control %q, %d bytes, %v", r.Header.Get("Cache-Control"), len(body), m)
	}

	r, body = do(t, c, newRequest(t, "GET", base+JSONPath+"?name=www.example.test&type=MX", nil))
	if r.StatusCode != 200 || r.Header.Get("Cache-Control") != "max-age=120" || !bytes.Contains(body, []byte(`"type":6`)) {
		t.Errorf("JSON NODATA: %d %q %s", r.StatusCode, r.Header.Get("Cache-Control"), body)
	}
}
