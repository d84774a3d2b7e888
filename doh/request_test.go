//go:build !wasip1

package doh

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/engine"
)

// TestServeRequest: a request held in memory (the edge module's) gets
// what the net/http adapter would give: the wire answer with the
// client's ID, the JSON form, a 400 for bad input, 415 for a POST of the
// wrong type; the exchange is observed with the peer.
func TestServeRequest(t *testing.T) {
	var seen exchanges
	h := NewHandler(&recordingResolver{}, Options{Observe: seen.observe})
	peer := netip.MustParseAddrPort("192.0.2.9:5353")
	serve := func(r Request) Response {
		t.Helper()
		r.Peer, r.Proto = peer, "HTTP/1.1"
		resp, ok := h.ServeRequest(context.Background(), &r)
		if !ok {
			t.Fatal("ServeRequest: not ok with the client still there")
		}
		return resp
	}

	body := pack(t, query(t, "a.example.", dns.TypeA, 0x4242))
	resp := serve(Request{Method: "POST", Path: DefaultPath, Header: Header{{"content-type", MediaTypeDNS}},
		ContentLength: int64(len(body)), Body: body})
	m := new(dns.Msg)
	if resp.Status != 200 || resp.Header.Get("content-type") != MediaTypeDNS || m.Unpack(resp.Body) != nil ||
		m.Id != 0x4242 || len(m.Answer) != 1 {
		t.Fatalf("POST: status %d, header %v, body %x", resp.Status, resp.Header, resp.Body)
	}
	if x := seen.last(t); x.Status != 200 || x.ClientIP != peer.Addr() || x.QName != "a.example." {
		t.Fatalf("observed %+v", x)
	}

	resp = serve(Request{Method: "GET", Path: JSONPath, RawQuery: "name=b.example&type=A"})
	if resp.Status != 200 || !strings.HasPrefix(resp.Header.Get("content-type"), MediaTypeJSON) ||
		!strings.Contains(string(resp.Body), "192.0.2.7") {
		t.Fatalf("JSON: status %d, body %s", resp.Status, resp.Body)
	}

	if resp = serve(Request{Method: "GET", Path: DefaultPath, RawQuery: "dns=!!"}); resp.Status != 400 {
		t.Fatalf("bad dns parameter: status %d, want 400", resp.Status)
	}
	resp = serve(Request{Method: "POST", Path: DefaultPath, Header: Header{{"content-type", "text/plain"}},
		ContentLength: int64(len(body)), Body: body})
	if resp.Status != 415 {
		t.Fatalf("POST text/plain: status %d, want 415", resp.Status)
	}
}

// TestServeRequestClientGone: a client gone before its answer gets
// nothing, and the exchange says so.
func TestServeRequestClientGone(t *testing.T) {
	var seen exchanges
	h := NewHandler(&recordingResolver{}, Options{Observe: seen.observe})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	body := pack(t, query(t, "a.example.", dns.TypeA, 1))
	_, ok := h.ServeRequest(ctx, &Request{Method: "POST", Path: DefaultPath, Header: Header{{"content-type", MediaTypeDNS}},
		ContentLength: int64(len(body)), Body: body})
	if ok {
		t.Fatal("ServeRequest answered a client that went away")
	}
	if x := seen.last(t); x.Status != StatusClientClosed {
		t.Fatalf("observed status %d, want %d", x.Status, StatusClientClosed)
	}
}

// brokenResolver answers nothing: an empty Wire, as a resolver that
// cannot read the query does.
type brokenResolver struct{}

func (brokenResolver) Resolve(_ context.Context, _, dst []byte) engine.Response {
	return engine.Response{Wire: dst, Rcode: -1}
}

// TestErrorAnswersPaddedAndFormed: a DNS error made here (NOTIMP for an
// opcode, SERVFAIL for a resolver without an answer) keeps the query's ID
// and question, is padded like any answer when the query was, is not
// kept (no-store), and reads in the JSON form too.
func TestErrorAnswersPaddedAndFormed(t *testing.T) {
	for _, tc := range []struct {
		name   string
		res    Resolver
		opcode int
		rcode  int
	}{
		{"NOTIFY", &recordingResolver{}, dns.OpcodeNotify, dns.RcodeNotImplemented},
		{"no answer from the resolver", brokenResolver{}, dns.OpcodeQuery, dns.RcodeServerFailure},
	} {
		h := NewHandler(tc.res, Options{})
		for _, padded := range []bool{false, true} {
			q := query(t, "a.example.", dns.TypeA, 0x5151)
			q.Opcode = tc.opcode
			if padded {
				q.SetEdns0(1232, false)
				q.IsEdns0().Option = append(q.IsEdns0().Option, &dns.EDNS0_PADDING{Padding: make([]byte, 20)})
			}
			body := pack(t, q)
			resp, _ := h.ServeRequest(t.Context(), &Request{Method: "POST", Path: DefaultPath, Proto: "HTTP/1.1",
				Header: Header{{"content-type", MediaTypeDNS}}, ContentLength: int64(len(body)), Body: body})
			m := new(dns.Msg)
			if resp.Status != 200 || m.Unpack(resp.Body) != nil || m.Id != 0x5151 || m.Rcode != tc.rcode ||
				len(m.Question) != 1 || m.Question[0].Name != "a.example." || resp.Header.Get("cache-control") != "no-store" {
				t.Fatalf("%s padded=%v: status %d, %v, headers %v", tc.name, padded, resp.Status, m, resp.Header)
			}
			if got := len(resp.Body)%PaddingBlock == 0; got != padded {
				t.Errorf("%s padded=%v: %d bytes", tc.name, padded, len(resp.Body))
			}
		}
	}
	h := NewHandler(brokenResolver{}, Options{})
	resp, _ := h.ServeRequest(t.Context(), &Request{Method: "GET", Path: JSONPath, RawQuery: "name=a.example", Proto: "HTTP/1.1"})
	if resp.Status != 200 || !strings.Contains(string(resp.Body), `"Status":2,`) || resp.Header.Get("cache-control") != "no-store" {
		t.Errorf("JSON: status %d, body %s", resp.Status, resp.Body)
	}
}
