//go:build !wasip1

package doh

import (
	"net/netip"
	"strconv"
	"testing"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/engine"
)

func TestClientIP(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	a := netip.MustParseAddr
	cases := []struct {
		name      string
		peer      string
		forwarded []string
		xff       []string
		want      string
	}{
		{"untrusted peer: headers ignored", "192.0.2.9", nil, []string{"198.51.100.1"}, "192.0.2.9"},
		{"trusted peer, no headers", "10.0.0.1", nil, nil, "10.0.0.1"},
		{"one hop", "10.0.0.1", nil, []string{"198.51.100.1"}, "198.51.100.1"},
		{"spoofed left part skipped", "10.0.0.1", nil, []string{"203.0.113.66, 198.51.100.1, 10.1.1.1"}, "198.51.100.1"},
		{"several header lines", "10.0.0.1", nil, []string{"203.0.113.66", "198.51.100.1,10.2.2.2"}, "198.51.100.1"},
		{"all trusted: leftmost", "10.0.0.1", nil, []string{"10.3.3.3, 10.2.2.2"}, "10.3.3.3"},
		{"garbage ends the walk at its writer", "10.0.0.1", nil, []string{"198.51.100.1, nonsense, 10.2.2.2"}, "10.2.2.2"},
		{"XFF with port and v6", "::1", nil, []string{"[2001:db8::7]:4711"}, "2001:db8::7"},
		{"Forwarded wins over XFF", "10.0.0.1", []string{`for=198.51.100.2;proto=https, for="[2001:db8::8]:443";by=10.0.0.1`}, []string{"203.0.113.1"}, "2001:db8::8"},
		{"Forwarded unknown", "10.0.0.1", []string{"for=unknown"}, nil, "10.0.0.1"},
		{"Forwarded without for", "10.0.0.1", []string{"proto=https", "for=198.51.100.3"}, nil, "198.51.100.3"},
		{"Forwarded case and spaces", "10.0.0.1", []string{` For = 198.51.100.4 ; Proto=http`}, nil, "198.51.100.4"},
		{"mapped v4", "10.0.0.1", nil, []string{"::ffff:198.51.100.5"}, "198.51.100.5"},
	}
	for _, tc := range cases {
		got := ClientIP(a(tc.peer), trusted, tc.forwarded, tc.xff)
		if got != a(tc.want) {
			t.Errorf("%s: got %s, want %s", tc.name, got, tc.want)
		}
	}
}

// TestClientIPThroughHandler checks that Observe gets the forwarded client
// only from a trusted peer (the test client is 127.0.0.1).
func TestClientIPThroughHandler(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		trusted []netip.Prefix
		want    string
	}{
		{nil, "127.0.0.1"},
		{[]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, "198.51.100.1"},
	} {
		var seen exchanges
		base, c := startTLS(t, NewHandler(&recordingResolver{}, Options{TrustedProxies: tc.trusted, Observe: seen.observe}), Limits{})
		req := newRequest(t, "GET", base+DefaultPath+"?dns="+b64(pack(t, query(t, "example.org.", dns.TypeA, 0))), nil,
			"X-Forwarded-For", "203.0.113.9, 198.51.100.1")
		do(t, c, req)
		x := seen.last(t)
		if x.ClientIP != netip.MustParseAddr(tc.want) || x.Peer.Addr() != netip.MustParseAddr("127.0.0.1") {
			t.Errorf("trusted %v: client %s peer %s, want client %s", tc.trusted, x.ClientIP, x.Peer, tc.want)
		}
	}
}

func TestMaxAge(t *testing.T) {
	rr := func(s string) dns.RR { r, _ := dns.NewRR(s); return r }
	soa := rr("z. 900 IN SOA ns.z. a.z. 1 2 3 4 300")
	opt := &dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT}}
	cases := []struct {
		name  string
		m     dns.Msg
		age   uint32
		store bool
	}{
		{"positive min of answer", dns.Msg{Answer: []dns.RR{rr("a.z. 30 IN A 192.0.2.1"), rr("a.z. 10 IN A 192.0.2.2")}}, 10, true},
		{"authority counts", dns.Msg{Answer: []dns.RR{rr("a.z. 30 IN A 192.0.2.1")}, Ns: []dns.RR{rr("z. 5 IN NS ns.z.")}}, 5, true},
		{"OPT ignored", dns.Msg{Answer: []dns.RR{rr("a.z. 30 IN A 192.0.2.1")}, Extra: []dns.RR{opt}}, 30, true},
		{"TTL 0", dns.Msg{Answer: []dns.RR{rr("a.z. 0 IN A 192.0.2.1")}}, 0, true},
		{"NODATA", dns.Msg{Ns: []dns.RR{soa}}, 300, true},
		{"NXDOMAIN", dns.Msg{MsgHdr: dns.MsgHdr{Rcode: dns.RcodeNameError}, Ns: []dns.RR{soa}}, 300, true},
		{"NXDOMAIN without SOA", dns.Msg{MsgHdr: dns.MsgHdr{Rcode: dns.RcodeNameError}}, 0, false},
		{"SERVFAIL", dns.Msg{MsgHdr: dns.MsgHdr{Rcode: dns.RcodeServerFailure}, Answer: []dns.RR{rr("a.z. 30 IN A 192.0.2.1")}}, 0, false},
		{"REFUSED", dns.Msg{MsgHdr: dns.MsgHdr{Rcode: dns.RcodeRefused}}, 0, false},
		{"NOTIMP", dns.Msg{MsgHdr: dns.MsgHdr{Rcode: dns.RcodeNotImplemented}}, 0, false},
	}
	for _, tc := range cases {
		age, store := engine.WireTTL(pack(t, &tc.m))
		if age != tc.age || store != tc.store {
			t.Errorf("%s: max-age %d cacheable %v, want %d %v", tc.name, age, store, tc.age, tc.store)
		}
		want := "no-store"
		if tc.store {
			want = "max-age=" + strconv.Itoa(int(tc.age))
		}
		if v := cacheControlValue(age, store); v != want {
			t.Errorf("%s: Cache-Control %q, want %q", tc.name, v, want)
		}
	}
	big := dns.Msg{Answer: []dns.RR{rr("a.z. 86400 IN A 192.0.2.1")}}
	if v := cacheControlValue(engine.WireTTL(pack(t, &big))); v != "max-age=86400" {
		t.Errorf("large TTL: %q", v)
	}
}

func TestPaddingLen(t *testing.T) {
	for _, tc := range []struct{ size, want int }{
		{1, 467}, {468, 0}, {469, 467}, {936, 0}, {65530, 0}, {65000, 52},
	} {
		if got := engine.PaddingLen(tc.size); got != tc.want || (got != 0 && (tc.size+got)%PaddingBlock != 0) {
			t.Errorf("engine.PaddingLen(%d) = %d, want %d", tc.size, got, tc.want)
		}
	}
}

func TestQueryParam(t *testing.T) {
	for _, tc := range []struct {
		raw, want string
		ok        bool
	}{
		{"dns=AAAB", "AAAB", true},
		{"ct=x&dns=AAAB&dns=CCCC", "AAAB", true},
		{"dnsx=1&xdns=2", "", false},
		{"dns=AAAB%3D%3D", "AAAB==", true},
		{"", "", false},
		{"dns", "", true},
	} {
		got, ok := queryParam(tc.raw, "dns")
		if got != tc.want || ok != tc.ok {
			t.Errorf("queryParam(%q) = %q %v, want %q %v", tc.raw, got, ok, tc.want, tc.ok)
		}
	}
}
