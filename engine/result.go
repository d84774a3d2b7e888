package engine

import (
	"github.com/dohfwd/dohfwd/engine/dnswire"
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
// wrong with the servers. The reply has ID 0: appendMade writes the
// client's.
func unavailableReply(cq *clientQuery, r Reason, t *tried, hideServers bool) []byte {
	rcode := dnswire.RcodeServerFailure
	if r == ReasonClientInFlight {
		rcode = dnswire.RcodeRefused
	}
	code, text := r.ede()
	var ttl uint32
	if cq.opt && cq.do {
		ttl = dnswire.EDNSFlagDO
	}
	// Without the list: header, question, OPT and the EDE's fixed text.
	base := dnswire.HeaderLen + len(cq.qname) + 4 + dnswire.OPTFixedLen + 6 + len(text)
	if t != nil && t.n > 0 && !hideServers {
		sep := ""
		if text != "" {
			sep = ": "
		}
		if list := t.text(clientSize(cq) - base - len(sep)); list != "" {
			text = text + sep + list
		}
	}
	set := dnswire.FlagQR | dnswire.FlagRA
	if cq.rd {
		set |= dnswire.FlagRD
	}
	if cq.cd {
		set |= dnswire.FlagCD
	}
	b := dnswire.NewBuilder(make([]byte, 0, dnswire.HeaderLen+len(cq.qname)+4+dnswire.OPTFixedLen+6+len(text)),
		dnswire.Header{Flags: dnswire.Flags(dnswire.OpcodeQuery, rcode, set)})
	b.Question(cq.qname, cq.qtype, cq.qclass)
	b.OPT(dnswire.DefaultMsgSize, ttl, dnswire.AppendEDE(nil, code, text))
	m, _ := b.Finish()
	return m
}

// clientSize is the largest message the client takes: its EDNS UDP size,
// else 512 (RFC 1035). DoH carries more, but a client that says so is
// believed. A padded query's reply is padded to a multiple of
// PaddingBlock (its Padding option adds 4 bytes), so that is the size
// before padding that still fits once padded.
func clientSize(cq *clientQuery) int {
	if !cq.opt {
		return dnswire.MinMsgSize
	}
	size := max(int(cq.udp), dnswire.MinMsgSize)
	if cq.padded {
		return size/PaddingBlock*PaddingBlock - 4
	}
	return size
}
