package engine

import (
	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/dnswire"
)

// Result is how a question ended.
type Result uint8

const (
	ResultAnswer      Result = iota // the upstream's NOERROR reply
	ResultNXDomain                  // the upstream's NXDOMAIN, after every candidate
	ResultUnavailable               // no usable answer: see Reason
	ResultLocal                     // synthetic, hosts or cache
	ResultCancelled                 // the client went away
	ResultStale                     // an expired answer, for an unavailable question: see Reason
	numResults
)

var resultNames = [numResults]string{"answer", "nxdomain", "unavailable", "local", "cancelled", "stale"}

func (r Result) String() string {
	if r < numResults {
		return resultNames[r]
	}
	return "unknown"
}

// Reason says why a question is unavailable.
type Reason uint8

const (
	ReasonNone            Reason = iota
	ReasonAttemptsSpent          // every attempt failed
	ReasonInFlightCeiling        // refused by the ceiling
	ReasonNoServers              // the scope has no servers
	ReasonQuestionTimeout        // the question's own budget ran out
	ReasonTruncated              // TC on the final attempt
	ReasonStaleTimer             // stale: the client response timer ran out first
	ReasonClientInFlight         // the client's share of transactions in flight is taken
)

var reasonNames = [...]string{"", "attempts spent", "in-flight ceiling", "no servers", "question timeout", "truncated on the last attempt", "client response timer", "client in-flight limit"}

func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "unknown"
}

// ede is the Extended DNS Error (RFC 8914) a client gets for an
// unavailable question.
func (r Reason) ede() (code uint16, text string) {
	switch r {
	case ReasonInFlightCeiling:
		return dnswire.ExtendedErrorCodeOther, "in-flight ceiling"
	case ReasonNoServers:
		return dnswire.ExtendedErrorCodeNoReachableAuthority, "no servers"
	case ReasonQuestionTimeout:
		return dnswire.ExtendedErrorCodeNoReachableAuthority, "question timeout"
	case ReasonClientInFlight:
		return dnswire.ExtendedErrorCodeProhibited, "client in-flight limit"
	}
	return dnswire.ExtendedErrorCodeNoReachableAuthority, ""
}

// unavailableReply is the SERVFAIL a client gets for an unavailable
// question: its question echoed, RA set, and an EDE option saying why.
// Its EXTRA-TEXT names each attempt in order (server, transport, outcome)
// unless hideServers, within the size the client can take.
// A client over its own limit is REFUSED (EDE 18, Prohibited): nothing is
// wrong with the servers.
func unavailableReply(q *dns.Msg, r Reason, t *tried, hideServers bool) *dns.Msg {
	m := new(dns.Msg)
	rcode := dnswire.RcodeServerFailure
	if r == ReasonClientInFlight {
		rcode = dnswire.RcodeRefused
	}
	m.SetRcode(q, rcode)
	m.RecursionAvailable = true
	code, text := r.ede()
	opt := &dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dnswire.TypeOPT}}
	opt.SetUDPSize(dnswire.DefaultMsgSize)
	qo := q.IsEdns0()
	if qo != nil && qo.Do() {
		opt.SetDo()
	}
	ede := &dns.EDNS0_EDE{InfoCode: code, ExtraText: text}
	opt.Option = append(opt.Option, ede)
	m.Extra = append(m.Extra, opt)
	if t != nil && t.n > 0 && !hideServers {
		sep := ""
		if text != "" {
			sep = ": "
		}
		if list := t.text(clientSize(qo) - m.Len() - len(sep)); list != "" {
			ede.ExtraText = text + sep + list
		}
	}
	return m
}

// clientSize is the largest message the client takes: its EDNS UDP size,
// else 512 (RFC 1035). DoH carries more, but a client that says so is
// believed. A padded query's reply is padded to a multiple of
// PaddingBlock (its Padding option adds 4 bytes), so that is the size
// before padding that still fits once padded.
func clientSize(o *dns.OPT) int {
	if o == nil {
		return dnswire.MinMsgSize
	}
	size := max(int(o.UDPSize()), dnswire.MinMsgSize)
	for _, op := range o.Option {
		if op.Option() == dnswire.EDNS0PADDING {
			return size/PaddingBlock*PaddingBlock - 4
		}
	}
	return size
}
