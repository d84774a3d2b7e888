package doh

import "github.com/miekg/dns"

// PaddingBlock is the block length responses are padded to (RFC 8467,
// section 4.1: the recommended Block-Length Padding for responses).
const PaddingBlock = 468

// wantsPadding reports whether a query carries an EDNS(0) Padding option
// (RFC 7830): only then is the response padded.
func wantsPadding(q *dns.Msg) bool {
	o := q.IsEdns0()
	if o == nil {
		return false
	}
	for _, e := range o.Option {
		if e.Option() == dns.EDNS0PADDING {
			return true
		}
	}
	return false
}

// zeros is the padding: RFC 7830 asks for zero octets.
var zeros [PaddingBlock]byte

// packPadded packs m, which the caller owns (a shallow copy will do: its
// Extra is replaced, not changed), with a Padding option sized so that the
// message is a multiple of PaddingBlock bytes. A message that a full block
// would take past MaxMessageSize is padded no further.
func packPadded(m *dns.Msg, buf []byte) ([]byte, error) {
	pad := &dns.EDNS0_PADDING{}
	opt := &dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT}}
	opt.SetUDPSize(dns.DefaultMsgSize)
	extra := make([]dns.RR, 0, len(m.Extra)+1)
	for _, rr := range m.Extra {
		if old, ok := rr.(*dns.OPT); ok {
			// Keep the reply's OPT header (size, DO, extended rcode) and
			// its options, except any padding of its own.
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

	wire, err := m.PackBuffer(buf)
	if err != nil {
		return nil, err
	}
	n := paddingLen(len(wire))
	if n == 0 {
		return wire, nil
	}
	pad.Padding = zeros[:n]
	return m.PackBuffer(wire[:0])
}

// paddingLen is how many padding bytes take a message of size bytes (with
// an empty Padding option already in it) to the next multiple of
// PaddingBlock, within MaxMessageSize.
func paddingLen(size int) int {
	n := (PaddingBlock - size%PaddingBlock) % PaddingBlock
	if size+n > MaxMessageSize {
		return 0
	}
	return n
}
