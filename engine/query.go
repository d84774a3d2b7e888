package engine

import (
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/dnswire"
)

// upstreamUDPSize is the EDNS0 UDP payload size of upstream queries
// (the DNS Flag Day 2020 value).
const upstreamUDPSize = 1232

var queryBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// packQuery builds the upstream query for one candidate name once: the
// client's RD and CD bits, EDNS0 at 1232 bytes with the client's DO bit,
// the client's ECS option only when forwardECS. The two bytes in front are
// for the TCP length; each transaction writes its own ID. The caller
// returns the buffer to queryBuffers.
//
// The message is written by hand: a header, one question and an OPT record
// are all a query is, and this runs for every question.
func packQuery(client *clientQuery, name string, forwardECS bool) (*[]byte, error) {
	bp := queryBuffers.Get().(*[]byte)
	buf, err := appendQuery((*bp)[:0], client, name, forwardECS)
	if err != nil {
		queryBuffers.Put(bp)
		return nil, fmt.Errorf("query %q: %w", name, err)
	}
	*bp = buf
	return bp, nil
}

// appendQuery appends the TCP length placeholder and the query to dst.
func appendQuery(dst []byte, client *clientQuery, name string, forwardECS bool) ([]byte, error) {
	var flags uint16
	if client.rd {
		flags |= 1 << 8
	}
	if client.cd {
		flags |= 1 << 4
	}
	dst = append(dst, 0, 0)                     // TCP length, written per transaction
	dst = binary.BigEndian.AppendUint16(dst, 0) // ID, written per transaction
	dst = binary.BigEndian.AppendUint16(dst, flags)
	dst = binary.BigEndian.AppendUint16(dst, 1) // QDCOUNT
	dst = binary.BigEndian.AppendUint16(dst, 0) // ANCOUNT
	dst = binary.BigEndian.AppendUint16(dst, 0) // NSCOUNT
	dst = binary.BigEndian.AppendUint16(dst, 1) // ARCOUNT: the OPT

	if client.qname != nil && name == client.name {
		// The name as the client asked it: its wire form is in the query
		// (uncompressed, checked by parse), the same bytes packing the
		// name would write.
		dst = append(dst, client.qname...)
	} else {
		start := len(dst)
		dst = append(dst, make([]byte, 256)...)[:start] // room for any name
		dst = dst[:start+256]
		end, err := dns.PackDomainName(name, dst, start, nil, false)
		if err != nil {
			return nil, err
		}
		dst = dst[:end]
	}
	dst = binary.BigEndian.AppendUint16(dst, client.qtype)
	dst = binary.BigEndian.AppendUint16(dst, client.qclass)

	var ttl uint32 // extended rcode 0, version 0, flags
	if client.do {
		ttl |= 1 << 15
	}
	var ecs []dns.EDNS0
	if forwardECS && client.ecs {
		if co := client.message().IsEdns0(); co != nil {
			for _, o := range co.Option {
				if o.Option() == dnswire.EDNS0SUBNET {
					ecs = append(ecs, o)
				}
			}
		}
	}
	if len(ecs) > 0 {
		// Rare: let miekg/dns pack the options.
		opt := &dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dnswire.TypeOPT, Class: upstreamUDPSize, Ttl: ttl}, Option: ecs}
		off := len(dst)
		dst = append(dst, make([]byte, dns.Len(opt)+64)...)
		end, err := dns.PackRR(opt, dst, off, nil, false)
		if err != nil {
			return nil, err
		}
		return dst[:end], nil
	}
	dst = append(dst, 0) // root name
	dst = binary.BigEndian.AppendUint16(dst, dnswire.TypeOPT)
	dst = binary.BigEndian.AppendUint16(dst, upstreamUDPSize)
	dst = binary.BigEndian.AppendUint32(dst, ttl)
	dst = binary.BigEndian.AppendUint16(dst, 0) // RDLENGTH
	return dst, nil
}
