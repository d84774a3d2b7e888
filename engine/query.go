package engine

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/dohfwd/dohfwd/engine/dnswire"
)

// upstreamUDPSize is the EDNS0 UDP payload size of upstream queries
// (the DNS Flag Day 2020 value).
const upstreamUDPSize = 1232

// askBuffers are one candidate's scratch while it is asked: its query,
// the receive buffer of its UDP transactions and the random bytes of their
// IDs. One pooled value for the three: as WebAssembly a sync.Pool Get and
// Put cost about as much as the rest of a transaction's bookkeeping. A UDP
// transaction held a receive buffer while it waited all the same.
type askBuffers struct {
	query []byte
	recv  [udpReceiveSize]byte
	ids   idBuffer
	// The ask's candidate, and its scratch (candidate.reset) for
	// scopes of up to maxStackServers servers.
	cand  candidate
	tx    transaction // the ask's attempt
	until [maxStackServers]time.Duration
	order [maxStackServers]int
	asked [maxStackServers]bool
	// first is the attempt StartMiss began in tx, until ask goes on
	// with it.
	first started
	// entry is the ask's answer while the question holds these buffers
	// (question.held): its msg is the reply where it was received.
	entry entry
}

var askBuffersPool = sync.Pool{New: func() any {
	return &askBuffers{query: make([]byte, 0, 512), ids: idBuffer{next: len(idBuffer{}.b)}}
}}

// packQuery builds the upstream query for one candidate name once into
// a pooled askBuffers: the client's RD and CD bits, EDNS0 at 1232 bytes
// with the client's DO bit, the client's ECS option only when forwardECS,
// or the subnet's (ECSAdd) when valid.
// The two bytes in front are for the TCP length; each transaction writes
// its own ID. The caller returns the buffers to askBuffersPool.
//
// The message is written by hand: a header, one question and an OPT record
// are all a query is, and this runs for every question.
func packQuery(client *clientQuery, name string, forwardECS bool, subnet netip.Prefix) (*askBuffers, error) {
	bufs := askBuffersPool.Get().(*askBuffers)
	buf, err := appendQuery(bufs.query[:0], client, name, forwardECS)
	if err == nil && subnet.IsValid() {
		buf = appendSubnet(buf, subnet)
	}
	if err != nil {
		askBuffersPool.Put(bufs)
		return nil, fmt.Errorf("query %q: %w", name, err)
	}
	bufs.query = buf
	return bufs, nil
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
		var err error
		if dst, err = dnswire.PackName(dst, name); err != nil {
			return nil, err
		}
	}
	dst = binary.BigEndian.AppendUint16(dst, client.qtype)
	dst = binary.BigEndian.AppendUint16(dst, client.qclass)

	var ttl uint32 // extended rcode 0, version 0, flags
	if client.do {
		ttl |= 1 << 15
	}
	var ecs []byte
	if forwardECS && client.ecs {
		ecs = ecsOptions(client.raw)
	}
	dst = append(dst, 0) // root name
	dst = binary.BigEndian.AppendUint16(dst, dnswire.TypeOPT)
	dst = binary.BigEndian.AppendUint16(dst, upstreamUDPSize)
	dst = binary.BigEndian.AppendUint32(dst, ttl)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(ecs))) // RDLENGTH
	return append(dst, ecs...), nil
}

// ecsOptions are the Client Subnet options of the query's OPT record, as
// the client wrote them.
func ecsOptions(query []byte) []byte {
	rr, ok := dnswire.FindOPT(query)
	if !ok {
		return nil
	}
	data := rr.Rdata(query)
	var out []byte
	for off := 0; ; {
		code, value, next, ok := dnswire.NextOption(data, off)
		if !ok {
			return out
		}
		if code == dnswire.EDNS0SUBNET {
			out = dnswire.AppendOption(out, code, value)
		}
		off = next
	}
}
