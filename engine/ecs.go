package engine

import (
	"encoding/binary"
	"net/netip"
	"strings"

	"github.com/dohfwd/dohfwd/engine/dnswire"
)

// ECSAdd (RFC 7871): the engine sends a scope's servers the client's
// subnet, its address (WithClient: after trusted proxies and the PROXY
// protocol) cut to the scope's source prefix, and keys the answer on what
// the server says it is for. An answer for scope prefix 0 (or without an
// ECS option: a server that ignores it) is every client's and goes under
// the question's own cache key, where any client finds it. Any other goes
// under a key of the subnet's own (the name, a space, the subnet: no name
// in presentation form holds a bare space), so one subnet's answer is
// never served to another; identical questions of one subnet share their
// flight. A question whose client is not known sends no subnet.

// subnetKey readies qn, in an ECSAdd scope, to ask with its client's
// subnet: it looks up the answer every client shares under key first (a
// hit is written into r, and ok is true), then returns the subnet's own
// key for the rest of the lookup.
func (qn *question) subnetKey(key cacheKey, r *found) (cacheKey, bool) {
	client := ClientOf(qn.ctx).Unmap()
	if !client.IsValid() {
		return key, false
	}
	if _, ok := qn.cached(key, r); ok {
		return key, true
	}
	bits := qn.scope.prefix4
	if client.Is6() {
		bits = qn.scope.prefix6
	}
	qn.subnet, _ = client.Prefix(bits)
	key.name = key.name + " " + qn.subnet.String()
	return key, false
}

// sharedKey is the key every client finds for a subnet's key.
func sharedKey(key cacheKey) cacheKey {
	if i := strings.IndexByte(key.name, ' '); i >= 0 {
		key.name = key.name[:i]
	}
	return key
}

// scopePrefixZero reports whether the options data of a reply say its
// answer is for every client: an ECS option with scope prefix 0, or none.
func scopePrefixZero(optData []byte) bool {
	for off := 0; ; {
		code, value, next, ok := dnswire.NextOption(optData, off)
		if !ok {
			return true
		}
		if code == dnswire.EDNS0SUBNET {
			return len(value) >= 4 && value[3] == 0
		}
		off = next
	}
}

// appendSubnet adds the ECS option for subnet (scope prefix 0) to query,
// the engine's own with its OPT record last and two bytes of TCP length
// in front (appendQuery).
func appendSubnet(query []byte, subnet netip.Prefix) []byte {
	qe := 2 + questionEnd(query[2:])
	if qe < 2 || len(query) < qe+dnswire.OPTFixedLen || query[qe] != 0 {
		return query
	}
	family, addr := uint16(1), subnet.Addr().AsSlice()
	if subnet.Addr().Is6() {
		family = 2
	}
	bits := subnet.Bits()
	addr = addr[:(bits+7)/8]
	query = binary.BigEndian.AppendUint16(query, dnswire.EDNS0SUBNET)
	query = binary.BigEndian.AppendUint16(query, uint16(4+len(addr)))
	query = binary.BigEndian.AppendUint16(query, family)
	query = append(query, byte(bits), 0)
	query = append(query, addr...)
	binary.BigEndian.PutUint16(query[qe+dnswire.OPTFixedLen-2:], uint16(len(query)-qe-dnswire.OPTFixedLen))
	return query
}
