package upstreamtest

import (
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// Answer is a server that answers every query NOERROR with rrs (zone-file
// text; "@" stands for the question's name).
func Answer(rrs ...string) Handler {
	return func(q Query) Action {
		if q.Msg == nil {
			return Action{}
		}
		return Action{Replies: []Reply{{Msg: ReplyTo(q.Msg, dns.RcodeSuccess, rrs...)}}}
	}
}

// Rcode is a server that answers every query with rcode.
func Rcode(rcode int) Handler {
	return func(q Query) Action {
		if q.Msg == nil {
			return Action{}
		}
		return Action{Replies: []Reply{{Msg: ReplyTo(q.Msg, rcode)}}}
	}
}

// Drop is a server that never answers.
func Drop() Handler { return func(Query) Action { return Action{} } }

// Delay is h with every reply delayed by d.
func Delay(d time.Duration, h Handler) Handler {
	return func(q Query) Action {
		a := h(q)
		for i := range a.Replies {
			a.Replies[i].Delay += d
		}
		return a
	}
}

// Gather is h with every reply held until the server has read queries
// for n distinct questions (name, lowercased, and type; counted over both
// transports): a proof that n questions were in flight at once, since
// none is answered before the last arrives. A question asked again (its
// first attempt timed out while the rest were still being sent) is held
// as well and counted once.
func Gather(n int, h Handler) Handler {
	all := make(chan struct{})
	var (
		mu   sync.Mutex
		seen = make(map[dns.Question]bool, n)
	)
	return func(q Query) Action {
		if q.Msg != nil && len(q.Msg.Question) == 1 {
			k := q.Msg.Question[0]
			k.Name = strings.ToLower(k.Name)
			mu.Lock()
			if !seen[k] {
				seen[k] = true
				if len(seen) == n {
					close(all)
				}
			}
			mu.Unlock()
		}
		a := h(q)
		for i := range a.Replies {
			a.Replies[i].Until = all
		}
		return a
	}
}

// ByTransport is a server that behaves as udp over UDP and tcp over TCP.
func ByTransport(udp, tcp Handler) Handler {
	return func(q Query) Action {
		if q.Transport == "tcp" {
			return tcp(q)
		}
		return udp(q)
	}
}

// ReplyTo builds a reply to q with rcode and the records rrs ("@" stands for
// the question's name). It keeps EDNS when q has it; rcodes above 15 use
// EDNS.
func ReplyTo(q *dns.Msg, rcode int, rrs ...string) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(q)
	m.RecursionAvailable = true
	if o := q.IsEdns0(); o != nil || rcode > 0xF {
		m.SetEdns0(1232, o != nil && o.Do())
	}
	m.Rcode = rcode
	for _, s := range rrs {
		if len(s) > 0 && s[0] == '@' {
			s = q.Question[0].Name + s[1:]
		}
		rr, err := dns.NewRR(s)
		if err != nil {
			panic("upstreamtest: record " + s + ": " + err.Error())
		}
		m.Answer = append(m.Answer, rr)
	}
	return m
}

// Truncated is a server that answers every query NOERROR with TC set and
// no records, forcing a TCP retry.
func Truncated() Handler {
	return func(q Query) Action {
		if q.Msg == nil {
			return Action{}
		}
		m := ReplyTo(q.Msg, dns.RcodeSuccess)
		m.Truncated = true
		return Action{Replies: []Reply{{Msg: m}}}
	}
}
