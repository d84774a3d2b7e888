package dnsserver

import (
	"encoding/binary"
	"errors"
	"slices"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/dnswire"
)

const (
	headerSize = 12
	flagQR     = 0x80 // in byte 2 of the header
	// PaddingBlock is the block length answers to padded queries are
	// padded to (RFC 8467, section 4.1).
	PaddingBlock = engine.PaddingBlock
	// maxMessageSize is the largest DNS message a stream can frame.
	maxMessageSize = 65535
)

// errNotDNS is a message that is not a DNS query at all: too short, a
// response, or a header and question that cannot be read. The stream that
// sent it is closed.
var errNotDNS = errors.New("not a DNS query")

// checkQuery gives a wire query the verdict every front end gives it
// (dnswire.CheckQuery). It returns q ready for the resolver when it is
// Accepted; reply set to the DNS error a Refused query gets here (FORMERR,
// NOTIMP, BADVERS); or, for an Unreadable one, FORMERR when its header
// reads as a query but QDCOUNT is not 1, else errNotDNS: there is no
// question to answer (DoH answers both 400).
func checkQuery(raw []byte) (q, reply *dns.Msg, err error) {
	v := dnswire.CheckQuery(raw)
	rcode := v.Rcode
	if v.Verdict == dnswire.Unreadable {
		if len(raw) < headerSize || raw[2]&flagQR != 0 || binary.BigEndian.Uint16(raw[4:]) == 1 {
			return nil, nil, errNotDNS
		}
		rcode = dns.RcodeFormatError
	}
	q = new(dns.Msg)
	unpackErr := q.Unpack(raw) // partly read when it fails: its ID, its OPT
	if v.Verdict != dnswire.Accepted {
		return q, errorReply(raw, rcode), nil
	}
	if unpackErr != nil || len(q.Question) != 1 {
		// Read by dnswire, not by miekg/dns: not expected.
		return q, errorReply(raw, dns.RcodeFormatError), nil
	}
	return q, nil, nil
}

// errorReply is the DNS error answer to the query raw
// (engine.AppendErrorReply), unpacked.
func errorReply(raw []byte, rcode int) *dns.Msg {
	m := new(dns.Msg)
	if err := m.Unpack(engine.AppendErrorReply(nil, raw, rcode)); err != nil {
		m.Id, m.Response, m.Rcode = binary.BigEndian.Uint16(raw), true, rcode
	}
	return m
}

// wantsPadding reports whether q carries an EDNS(0) Padding option (RFC
// 7830): only then is its answer padded (RFC 8467 §4).
func wantsPadding(q *dns.Msg) bool {
	if o := q.IsEdns0(); o != nil {
		for _, e := range o.Option {
			if e.Option() == dns.EDNS0PADDING {
				return true
			}
		}
	}
	return false
}

// addPadding gives m, a shallow copy the caller owns (its Extra is
// replaced, not changed), an OPT record of its own that keeps the reply's
// OPT header (size, DO, extended rcode) and its options but any padding,
// plus an empty Padding option, which it returns for the caller to size
// once the packed length is known.
func addPadding(m *dns.Msg) *dns.EDNS0_PADDING {
	pad := &dns.EDNS0_PADDING{}
	opt := &dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT}}
	opt.SetUDPSize(dns.DefaultMsgSize)
	extra := make([]dns.RR, 0, len(m.Extra)+1)
	for _, rr := range m.Extra {
		if old, ok := rr.(*dns.OPT); ok {
			opt.Hdr.Class, opt.Hdr.Ttl = old.Hdr.Class, old.Hdr.Ttl
			for _, e := range old.Option {
				if e.Option() != dns.EDNS0PADDING {
					opt.Option = append(opt.Option, e)
				}
			}
			continue
		}
		extra = append(extra, rr)
	}
	opt.Option = append(opt.Option, pad)
	m.Extra = append(extra, opt)
	return pad
}

// packReply packs reply for the client without changing it: the query's
// ID, compressed, padded to a multiple of PaddingBlock when the query was
// padded, and cut to fit limit bytes (UDP) with TC set; limit 0 is no
// limit. buf, used to its capacity, is reused when it is big enough.
func packReply(reply, q *dns.Msg, limit int, buf []byte) ([]byte, error) {
	m := *reply // a shallow copy: the resolver's message stays as it was
	m.Compress = true
	if q != nil {
		m.Id = q.Id
	}
	var pad *dns.EDNS0_PADDING
	if q != nil && wantsPadding(q) {
		pad = addPadding(&m)
	}
	// PackBuffer reuses a buffer only up to its length: hand it all.
	wire, err := m.PackBuffer(buf[:cap(buf)])
	if err != nil {
		return nil, err
	}
	if limit > 0 && len(wire) > limit {
		// Truncate reslices and appends: give it sections of its own,
		// since the records may be shared with the cache.
		m.Answer, m.Ns, m.Extra = slices.Clone(m.Answer), slices.Clone(m.Ns), slices.Clone(m.Extra)
		m.Truncate(limit)
		if wire, err = m.PackBuffer(wire[:cap(wire)]); err != nil {
			return nil, err
		}
	}
	if pad != nil {
		n := engine.PaddingLen(len(wire))
		if limit > 0 && len(wire)+n > limit {
			n = 0 // padding never costs an answer
		}
		if n > 0 {
			pad.Padding = engine.PaddingBytes(n)
			return m.PackBuffer(wire[:cap(wire)])
		}
	}
	return wire, nil
}

// udpLimit is the largest answer a UDP client takes: its EDNS payload size,
// at least 512 bytes (RFC 6891, section 6.2.5).
func udpLimit(q *dns.Msg) int {
	if q != nil {
		if o := q.IsEdns0(); o != nil {
			return max(int(o.UDPSize()), dns.MinMsgSize)
		}
	}
	return dns.MinMsgSize
}

// errorReplyTo is the DNS error answer to a parsed query.
func errorReplyTo(q *dns.Msg, rcode int) *dns.Msg {
	m := new(dns.Msg)
	m.SetRcode(q, rcode)
	m.RecursionAvailable = true
	return m
}

// refusedReply is the answer to a client over its limits: REFUSED with
// EDE 18 (Prohibited) when it speaks EDNS.
func refusedReply(q *dns.Msg) *dns.Msg {
	m := errorReplyTo(q, dns.RcodeRefused)
	if q.IsEdns0() != nil {
		opt := &dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT}}
		opt.SetUDPSize(dns.DefaultMsgSize)
		opt.Option = append(opt.Option, &dns.EDNS0_EDE{InfoCode: dns.ExtendedErrorCodeProhibited, ExtraText: "client over its limits"})
		m.Extra = append(m.Extra, opt)
	}
	return m
}
