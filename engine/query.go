package engine

import (
	"sync"

	"github.com/miekg/dns"
)

// upstreamUDPSize is the EDNS0 UDP payload size of upstream queries
// (the DNS Flag Day 2020 value).
const upstreamUDPSize = 1232

var queryBuffers = sync.Pool{New: func() any { b := make([]byte, 2, 512); return &b }}

// packQuery builds the upstream query for one candidate name once: the
// client's RD and CD bits, EDNS0 at 1232 bytes with the client's DO bit,
// the client's ECS option only when forwardECS. The two bytes in front are
// for the TCP length; each transaction writes its own ID.
func packQuery(client *dns.Msg, name string, forwardECS bool) (wire []byte, release func()) {
	cq := client.Question[0]
	m := dns.Msg{
		MsgHdr: dns.MsgHdr{
			Opcode:           dns.OpcodeQuery,
			RecursionDesired: client.RecursionDesired,
			CheckingDisabled: client.CheckingDisabled,
		},
		Question: []dns.Question{{Name: name, Qtype: cq.Qtype, Qclass: cq.Qclass}},
	}
	opt := dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT, Class: upstreamUDPSize}}
	if co := client.IsEdns0(); co != nil {
		if co.Do() {
			opt.SetDo()
		}
		if forwardECS {
			for _, o := range co.Option {
				if o.Option() == dns.EDNS0SUBNET {
					opt.Option = append(opt.Option, o)
				}
			}
		}
	}
	m.Extra = []dns.RR{&opt}
	bp := queryBuffers.Get().(*[]byte)
	packed, err := m.PackBuffer((*bp)[2:cap(*bp)])
	if err != nil {
		// The front end checked the question; a name that cannot be
		// packed here still gets a well-formed (empty) query.
		packed = nil
	}
	buf := append((*bp)[:2], packed...)
	*bp = buf
	return buf, func() { queryBuffers.Put(bp) }
}
