package main

import (
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/engine/upstreamtest"
)

// The spoofing defences toward upstreams through the built binary: DNS
// cookies with a real server that speaks them (Knot DNS with its cookies
// module, which answers BADCOOKIE until it is sent its server cookie) and
// keeps case, and forged replies from the programmable upstream.

// Cookies and 0x20 are on by default: a real cookie server answers dig
// over DoH in the client's own case, dohfwd learns its server cookie
// (/status), and no reply is thrown away.
func TestUpstreamCookiesWithRealServer(t *testing.T) {
	t.Parallel()
	needTool(t, "knotd")
	addr := upstreamtest.StartKnotCookies(t, upstreamtest.Zone{Origin: "e2e.test.", Text: testZone})
	d := startDohfwd(t, scopeYAML(addr), newPKI(t))
	for _, name := range []string{"WwW.E2e.TeSt", "ttl.e2e.test", "V6.e2e.TEST"} {
		out := runTool(t, "dig", d.digArgs("+https", name, "A", "+noall", "+question", "+answer", "+comments")...)
		if !strings.Contains(out, "status: NOERROR") || !strings.Contains(out, ";"+name+".\t") {
			t.Fatalf("dig %s:\n%s", name, out)
		}
	}
	out := runTool(t, "dig", d.digArgs("+https", "WwW.E2e.TeSt", "A", "+noall", "+answer")...)
	if !strings.Contains(out, "WwW.E2e.TeSt.\t") || !strings.Contains(out, "127.0.0.1") {
		t.Fatalf("answer not in the client's case:\n%s", out)
	}
	st := d.status()
	srv := st["scopes"].([]any)[0].(map[string]any)["servers"].([]any)[0].(map[string]any)
	if srv["cookie"] != true || srv["case_not_kept"] == true {
		t.Fatalf("status of the server %v: want cookie true, case kept", srv)
	}
	counters := st["counters"].(map[string]any)
	if n, _ := counters["mismatched_replies"].(float64); n != 0 {
		t.Fatalf("mismatched replies %v from a real server, want 0", n)
	}
	if n, _ := counters["upstream_failed"].(float64); n != 0 {
		t.Fatalf("upstream_failed %v: the BADCOOKIE retry must not fail an attempt", n)
	}
}

// Forged replies with the right ID and port but a wrong cookie, or the
// name in the wrong case, come before the server's own: dig still gets
// the server's answer, and the forgeries count as mismatched replies.
func TestForgedUpstreamRepliesIgnored(t *testing.T) {
	t.Parallel()
	up := upstreamtest.Start(t, func(q upstreamtest.Query) upstreamtest.Action {
		if q.Msg == nil || len(q.Msg.Question) != 1 {
			return upstreamtest.Action{}
		}
		var client []byte
		if o := q.Msg.IsEdns0(); o != nil {
			for _, opt := range o.Option {
				if c, ok := opt.(*dns.EDNS0_COOKIE); ok && len(c.Cookie) >= 16 {
					client = []byte(c.Cookie[:16])
				}
			}
		}
		cookie := func(m *dns.Msg, hex string) *dns.Msg {
			m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: hex})
			return m
		}
		serverCookie := "0102030405060708090a0b0c0d0e0f10"
		real := cookie(upstreamtest.ReplyTo(q.Msg, dns.RcodeSuccess, "@ 60 IN A 192.0.2.1"), string(client)+serverCookie)
		wrongCookie := cookie(upstreamtest.ReplyTo(q.Msg, dns.RcodeSuccess, "@ 60 IN A 192.0.2.66"), "6666666666666666"+serverCookie)
		lq := q.Msg.Copy()
		lq.Question[0].Name = swapCase(lq.Question[0].Name)
		wrongCase := cookie(upstreamtest.ReplyTo(lq, dns.RcodeSuccess, "@ 60 IN A 192.0.2.67"), string(client)+serverCookie)
		return upstreamtest.Action{Replies: []upstreamtest.Reply{
			{Msg: wrongCookie}, {Msg: wrongCase}, {Msg: real, Delay: 50 * time.Millisecond},
		}}
	})
	d := startDohfwd(t, scopeYAML(up.String()), newPKI(t))
	for _, name := range []string{"forged1.e2e.test", "forged2.e2e.test"} {
		out := runTool(t, "dig", d.digArgs("+https", name, "A", "+noall", "+answer")...)
		if !strings.Contains(out, "192.0.2.1") || strings.Contains(out, "192.0.2.66") || strings.Contains(out, "192.0.2.67") {
			t.Fatalf("dig %s: want the server's 192.0.2.1:\n%s", name, out)
		}
	}
	counters := d.status()["counters"].(map[string]any)
	if n, _ := counters["mismatched_replies"].(float64); n != 4 {
		t.Fatalf("mismatched replies %v, want the 4 forgeries", n)
	}
	if n, _ := counters["upstream_failed"].(float64); n != 0 {
		t.Fatalf("upstream_failed %v, want 0: a forgery does not end an attempt", n)
	}
}

// swapCase is s with every ASCII letter in the other case.
func swapCase(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c|0x20 && c|0x20 <= 'z' {
			b[i] = c ^ 0x20
		}
	}
	return string(b)
}
