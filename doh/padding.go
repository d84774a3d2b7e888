package doh

import (
	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/engine"
)

// PaddingBlock is the block length responses are padded to (RFC 8467,
// section 4.1: the recommended Block-Length Padding for responses).
const PaddingBlock = engine.PaddingBlock

// packPadded packs m, which the caller owns (a shallow copy will do: its
// Extra is replaced, not changed), with a Padding option sized so that the
// message is a multiple of PaddingBlock bytes (engine.PaddingLen).
func packPadded(m *dns.Msg, buf []byte) ([]byte, error) {
	pad := addPadding(m)
	wire, err := m.PackBuffer(buf)
	if err != nil {
		return nil, err
	}
	n := engine.PaddingLen(len(wire))
	if n == 0 {
		return wire, nil
	}
	pad.Padding = engine.PaddingBytes(n)
	return m.PackBuffer(wire[:0])
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

// errorReply is the DNS error answer to the query raw
// (engine.AppendErrorReply), unpacked.
func errorReply(raw []byte, rcode int) *dns.Msg {
	m := new(dns.Msg)
	if err := m.Unpack(engine.AppendErrorReply(nil, raw, rcode)); err != nil {
		m.Id, m.Response, m.Rcode = uint16(raw[0])<<8|uint16(raw[1]), true, rcode
	}
	return m
}
