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
	pad := engine.AddPadding(m)
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
