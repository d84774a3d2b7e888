//go:build !wasip1

package doh

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/memnet"
)

// Request kinds of FuzzDoHRequest.
const (
	fuzzGET     = iota // GET /dns-query?dns=<param>, param as written
	fuzzGETBody        // GET /dns-query?dns=<base64url(body)>: a message through the GET path
	fuzzPOST           // POST /dns-query with body
	fuzzJSON           // GET /resolve?<param>: the JSON parameters
	fuzzKinds
)

// fuzzEngine is a real engine over the in-memory network: its upstream
// answers every question with an A record, local.test is a hosts name, and
// the cache is on, so requests reach the wire path, the cache and the
// local answers.
func fuzzEngine(t testing.TB) *engine.Engine {
	n := memnet.New()
	server := netip.MustParseAddrPort("127.0.1.1:53")
	n.Handle(server, memnet.Respond(memnet.Reply{Msg: func(q *dns.Msg) *dns.Msg {
		m := new(dns.Msg)
		m.SetReply(q)
		if q.Question[0].Qtype == dns.TypeA {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA,
				Class: dns.ClassINET, Ttl: 60}, A: []byte{192, 0, 2, 9}})
		}
		return m
	}}))
	e, err := engine.New(engine.Config{
		Scopes: []engine.ScopeConfig{{Name: "main", DefaultRoute: true, Servers: []string{server.String()}}},
		Hosts:  map[string][]string{"local.test": {"192.0.2.1", "2001:db8::1"}},
		Cache:  engine.CacheConfig{MaxEntries: 1000},
	}, engine.Options{Network: n})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// FuzzDoHRequest sends arbitrary GET parameters, POST bodies and JSON
// parameters through the whole handler to a real engine. It must never
// panic or fail inside (500), every status must be one the handler
// documents, and every 200 must carry what its headers say: a DNS message
// with the query's ID, or JSON.
func FuzzDoHRequest(f *testing.F) {
	addSeeds(f)
	e := fuzzEngine(f)
	h := NewHandler(e, Options{})
	f.Fuzz(func(t *testing.T, kind uint8, param string, body []byte) {
		r := &http.Request{Method: http.MethodGet, URL: &url.URL{Path: DefaultPath}, Header: http.Header{},
			Proto: "HTTP/2.0", ProtoMajor: 2, RemoteAddr: "192.0.2.100:4321"}
		var sent []byte // the DNS query sent, when the request carries one whole
		switch kind % fuzzKinds {
		case fuzzGET:
			r.URL.RawQuery = "dns=" + param
		case fuzzGETBody:
			r.URL.RawQuery = "dns=" + base64.RawURLEncoding.EncodeToString(body)
			sent = body
		case fuzzPOST:
			r.Method = http.MethodPost
			r.Header.Set("Content-Type", MediaTypeDNS)
			r.Body = http.NoBody
			if len(body) > 0 {
				r.Body = httpBody(body)
			}
			r.ContentLength = int64(len(body))
			sent = body
		case fuzzJSON:
			r.URL.Path, r.URL.RawQuery = JSONPath, param
		}
		r = r.WithContext(t.Context())
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		res := w.Result()
		got := w.Body.Bytes()
		switch res.StatusCode {
		case http.StatusOK:
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType:
			return
		default:
			t.Fatalf("kind %d: status %d: %s", kind%fuzzKinds, res.StatusCode, got)
		}
		if cl := res.Header.Get("Content-Length"); cl != strconv.Itoa(len(got)) {
			t.Fatalf("Content-Length %s for a body of %d bytes", cl, len(got))
		}
		if kind%fuzzKinds == fuzzJSON {
			if !json.Valid(got) {
				t.Fatalf("200 with a body that is not JSON: %q", got)
			}
			return
		}
		m := new(dns.Msg)
		if err := m.Unpack(got); err != nil {
			t.Fatalf("200 with a body that does not unpack (%v): %x", err, got)
		}
		if len(sent) >= 2 && m.Id != uint16(sent[0])<<8|uint16(sent[1]) {
			t.Fatalf("answer ID %d for query ID %x", m.Id, sent[:2])
		}
	})
}

type bodyReader struct{ *bytes.Reader }

func (bodyReader) Close() error { return nil }

func httpBody(b []byte) bodyReader { return bodyReader{bytes.NewReader(b)} }

// addSeeds adds the seed corpus's queries (testdata/queries: real queries
// as dig, kdig and browsers send them) in each form, and JSON parameters.
func addSeeds(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "queries", "*.bin"))
	if len(files) == 0 {
		f.Fatal("no seed queries in testdata/queries")
	}
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(fuzzGET), base64.RawURLEncoding.EncodeToString(b), []byte(nil))
		f.Add(uint8(fuzzGETBody), "", b)
		f.Add(uint8(fuzzPOST), "", b)
	}
	for _, p := range []string{"name=local.test", "name=example.org&type=AAAA&do=1&cd=true",
		"name=example.org&type=65", "name=.&type=NS", "name=%00&type=A", "type=A", "name=a..b", "name=example.org&type=99999"} {
		f.Add(uint8(fuzzJSON), p, []byte(nil))
	}
}
