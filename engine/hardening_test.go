package engine_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/enginetest"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
	"github.com/miekg/dns"
)

// The spoofing defences toward upstreams, on real loopback sockets with
// the programmable upstream: DNS cookies (RFC 7873) and 0x20. A forged
// reply (the right ID and port, a wrong cookie or case) is ignored and
// the server's answer still arrives, in the same attempt.

// hardenedEngine is an engine over real sockets with cookies and 0x20 on
// and one default-route scope listing up.
func hardenedEngine(t *testing.T, timeout time.Duration, attempts int, obs engine.Observer, up string) *engine.Engine {
	t.Helper()
	e, err := engine.New(engine.Config{
		TransactionTimeout: timeout, Attempts: attempts,
		UpstreamCookies: true, Upstream0x20: true,
		Scopes: []engine.ScopeConfig{{Name: "main", DefaultRoute: true, Servers: []string{up}}},
	}, engine.Options{Network: engine.NativeNetwork{}, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// cookieOf returns the COOKIE option's value in m, or nil.
func cookieOf(m *dns.Msg) []byte {
	if o := m.IsEdns0(); o != nil {
		for _, opt := range o.Option {
			if c, ok := opt.(*dns.EDNS0_COOKIE); ok {
				b, _ := hexBytes(c.Cookie)
				return b
			}
		}
	}
	return nil
}

func hexBytes(s string) ([]byte, bool) {
	b := make([]byte, len(s)/2)
	for i := range b {
		var v byte
		for _, c := range s[2*i : 2*i+2] {
			switch {
			case '0' <= c && c <= '9':
				v = v<<4 | byte(c-'0')
			case 'a' <= c && c <= 'f':
				v = v<<4 | byte(c-'a'+10)
			case 'A' <= c && c <= 'F':
				v = v<<4 | byte(c-'A'+10)
			default:
				return nil, false
			}
		}
		b[i] = v
	}
	return b, true
}

// withCookie is reply with a COOKIE option of value cookie.
func withCookie(reply *dns.Msg, cookie []byte) *dns.Msg {
	if reply.IsEdns0() == nil {
		reply.SetEdns0(1232, false)
	}
	o := reply.IsEdns0()
	o.Option = append(o.Option, &dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: hexString(cookie)})
	return reply
}

func hexString(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&0xF])
	}
	return string(out)
}

var serverCookie = []byte("server-cookie-16")

// cookieServer answers with rrs, echoing the client cookie with
// serverCookie.
func cookieServer(rrs ...string) upstreamtest.Handler {
	return func(q upstreamtest.Query) upstreamtest.Action {
		if q.Msg == nil {
			return upstreamtest.Action{}
		}
		c := cookieOf(q.Msg)
		m := upstreamtest.ReplyTo(q.Msg, dns.RcodeSuccess, rrs...)
		if len(c) >= 8 {
			m = withCookie(m, append(c[:8:8], serverCookie...))
		}
		return upstreamtest.Action{Replies: []upstreamtest.Reply{{Msg: m}}}
	}
}

func answerIP(t *testing.T, r enginetest.Response) string {
	t.Helper()
	if r.Result != engine.ResultAnswer || len(r.Msg.Answer) != 1 {
		t.Fatalf("result %v with %d answers, want one answer", r.Result, len(r.Msg.Answer))
	}
	a, ok := r.Msg.Answer[0].(*dns.A)
	if !ok {
		t.Fatalf("answer %v, want an A record", r.Msg.Answer[0])
	}
	return a.A.String()
}

// A client cookie per server, the same on every query; the server cookie
// it returned goes back from the next query on.
func TestCookieSentAndServerCookieLearned(t *testing.T) {
	up := upstreamtest.Start(t, cookieServer("@ 60 IN A 192.0.2.1"))
	e := hardenedEngine(t, 2*time.Second, 3, nil, up.String())
	for _, name := range []string{"one.example.test.", "two.example.test.", "three.example.test."} {
		enginetest.Resolve(e, context.Background(), newQuery(name, dns.TypeA))
	}
	qs := up.Queries()
	if len(qs) != 3 {
		t.Fatalf("%d queries, want 3", len(qs))
	}
	first := cookieOf(qs[0].Msg)
	if len(first) != 8 {
		t.Fatalf("first query's cookie %x, want a client cookie of 8 bytes alone", first)
	}
	for i, q := range qs[1:] {
		c := cookieOf(q.Msg)
		if !bytes.Equal(c, append(first[:8:8], serverCookie...)) {
			t.Fatalf("query %d's cookie %x, want the client cookie %x and the server cookie %q", i+2, c, first, serverCookie)
		}
	}
	if st := e.Status(); !st.Scopes[0].Servers[0].Cookie {
		t.Fatalf("status %+v: the server cookie is not shown learned", st.Scopes[0].Servers[0])
	}
}

// A reply whose client cookie is not the engine's is ignored (a
// mismatched reply): the server's own, after it, is the answer, in one
// attempt.
func TestCookieForgedReplyIgnored(t *testing.T) {
	up := upstreamtest.Start(t, func(q upstreamtest.Query) upstreamtest.Action {
		real := cookieServer("@ 60 IN A 192.0.2.1")(q)
		forged := withCookie(upstreamtest.ReplyTo(q.Msg, dns.RcodeSuccess, "@ 60 IN A 192.0.2.66"), []byte("forged!!"+string(serverCookie)))
		real.Replies[0].Delay = 50 * time.Millisecond
		return upstreamtest.Action{Replies: append([]upstreamtest.Reply{{Msg: forged}}, real.Replies...)}
	})
	log := new(eventLog)
	e := hardenedEngine(t, 2*time.Second, 3, log, up.String())
	r := enginetest.Resolve(e, context.Background(), newQuery("forged.example.test.", dns.TypeA))
	if ip := answerIP(t, r); ip != "192.0.2.1" {
		t.Fatalf("answer %s, want the server's 192.0.2.1", ip)
	}
	if n := len(log.attemptList()); n != 1 {
		t.Fatalf("%d attempts, want 1", n)
	}
	if n := e.Counters().MismatchedReplies; n != 1 {
		t.Fatalf("mismatched replies %d, want the forged one", n)
	}
}

// A reply without a cookie from a server that sent one before is
// ignored: the forger must guess the cookie, not leave it out.
func TestCookieMissingFromCookieServerIgnored(t *testing.T) {
	var n int
	var mu sync.Mutex
	up := upstreamtest.Start(t, func(q upstreamtest.Query) upstreamtest.Action {
		mu.Lock()
		n++
		first := n == 1
		mu.Unlock()
		real := cookieServer("@ 60 IN A 192.0.2.1")(q)
		if first {
			return real
		}
		forged := upstreamtest.ReplyTo(q.Msg, dns.RcodeSuccess, "@ 60 IN A 192.0.2.66")
		real.Replies[0].Delay = 50 * time.Millisecond
		return upstreamtest.Action{Replies: append([]upstreamtest.Reply{{Msg: forged}}, real.Replies...)}
	})
	e := hardenedEngine(t, 2*time.Second, 3, nil, up.String())
	enginetest.Resolve(e, context.Background(), newQuery("learn.example.test.", dns.TypeA))
	r := enginetest.Resolve(e, context.Background(), newQuery("nocookie.example.test.", dns.TypeA))
	if ip := answerIP(t, r); ip != "192.0.2.1" {
		t.Fatalf("answer %s, want the server's 192.0.2.1", ip)
	}
}

// BADCOOKIE with a new server cookie is asked again once, within the
// same attempt, with that cookie.
func TestBadCookieRetriedOnce(t *testing.T) {
	fresh := []byte("fresh-cookie-16b")
	up := upstreamtest.Start(t, func(q upstreamtest.Query) upstreamtest.Action {
		c := cookieOf(q.Msg)
		if len(c) < 8 {
			return upstreamtest.Action{}
		}
		if !bytes.Equal(c[8:], fresh) {
			m := withCookie(upstreamtest.ReplyTo(q.Msg, dns.RcodeBadCookie), append(c[:8:8], fresh...))
			return upstreamtest.Action{Replies: []upstreamtest.Reply{{Msg: m}}}
		}
		m := withCookie(upstreamtest.ReplyTo(q.Msg, dns.RcodeSuccess, "@ 60 IN A 192.0.2.1"), c)
		return upstreamtest.Action{Replies: []upstreamtest.Reply{{Msg: m}}}
	})
	log := new(eventLog)
	e := hardenedEngine(t, 2*time.Second, 3, log, up.String())
	r := enginetest.Resolve(e, context.Background(), newQuery("bad.example.test.", dns.TypeA))
	if ip := answerIP(t, r); ip != "192.0.2.1" {
		t.Fatalf("answer %s", ip)
	}
	if n := len(log.attemptList()); n != 1 {
		t.Fatalf("%d attempts, want the retry within the first", n)
	}
	if n := len(up.Queries()); n != 2 {
		t.Fatalf("%d queries, want the query and its retry", n)
	}
}

// The name goes upstream in random case; a reply with the name in
// another case is ignored and the server's answer arrives; the client
// reads its own case.
func TestCaseForgedReplyIgnored(t *testing.T) {
	const name = "CaseRandomization.Example.Test."
	up := upstreamtest.Start(t, func(q upstreamtest.Query) upstreamtest.Action {
		real := upstreamtest.Answer("@ 60 IN A 192.0.2.1")(q)
		forgedQ := q.Msg.Copy()
		forgedQ.Question[0].Name = strings.ToLower(forgedQ.Question[0].Name)
		forged := upstreamtest.ReplyTo(forgedQ, dns.RcodeSuccess, "@ 60 IN A 192.0.2.66")
		real.Replies[0].Delay = 50 * time.Millisecond
		return upstreamtest.Action{Replies: append([]upstreamtest.Reply{{Msg: forged}}, real.Replies...)}
	})
	e := hardenedEngine(t, 2*time.Second, 3, nil, up.String())
	r := enginetest.Resolve(e, context.Background(), newQuery(name, dns.TypeA))
	if ip := answerIP(t, r); ip != "192.0.2.1" {
		t.Fatalf("answer %s, want the server's 192.0.2.1", ip)
	}
	if got, owner := r.Msg.Question[0].Name, r.Msg.Answer[0].Header().Name; got != name || owner != name {
		t.Fatalf("question %q, answer's owner %q, want the client's %q", got, owner, name)
	}
	asked := up.Queries()[0].Msg.Question[0].Name
	if asked == name || asked == strings.ToLower(name) || !strings.EqualFold(asked, name) {
		t.Fatalf("asked %q upstream, want %q in random case", asked, name)
	}
	if n := e.Counters().MismatchedReplies; n != 1 {
		t.Fatalf("mismatched replies %d, want the forged one", n)
	}
}

type caseLog struct {
	eventLog
	mu     sync.Mutex
	marked []string
}

func (l *caseLog) CaseNotKept(server string) {
	l.mu.Lock()
	l.marked = append(l.marked, server)
	l.mu.Unlock()
}

// A server that answers with the name in lower case twice in a row is
// marked (reported once) and asked in lower case from then on.
func TestCaseNotKeptMarksServer(t *testing.T) {
	up := upstreamtest.Start(t, func(q upstreamtest.Query) upstreamtest.Action {
		lq := q.Msg.Copy()
		lq.Question[0].Name = strings.ToLower(lq.Question[0].Name)
		return upstreamtest.Action{Replies: []upstreamtest.Reply{{Msg: upstreamtest.ReplyTo(lq, dns.RcodeSuccess, "@ 60 IN A 192.0.2.1")}}}
	})
	log := new(caseLog)
	e := hardenedEngine(t, 300*time.Millisecond, 3, log, up.String())
	// Two ignored replies mark the server; the third attempt is asked in
	// lower case and answered.
	r := enginetest.Resolve(e, context.Background(), newQuery("lower.example.test.", dns.TypeA))
	if ip := answerIP(t, r); ip != "192.0.2.1" {
		t.Fatalf("answer %s", ip)
	}
	r = enginetest.Resolve(e, context.Background(), newQuery("Again.Example.Test.", dns.TypeA))
	if ip := answerIP(t, r); ip != "192.0.2.1" {
		t.Fatalf("answer %s", ip)
	}
	qs := up.Queries()
	if last := qs[len(qs)-1].Msg.Question[0].Name; last != "again.example.test." {
		t.Fatalf("asked %q after the mark, want lower case", last)
	}
	if len(log.marked) != 1 || log.marked[0] != up.String() {
		t.Fatalf("reported %v, want %s once", log.marked, up)
	}
	if st := e.Status(); !st.Scopes[0].Servers[0].CaseNotKept {
		t.Fatalf("status %+v: the mark is not shown", st.Scopes[0].Servers[0])
	}
}
