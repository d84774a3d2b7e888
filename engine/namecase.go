package engine

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"

	"github.com/dohfwd/dohfwd/engine/dnswire"
)

// 0x20 (draft-vixie-dnsext-dns0x20): every transaction asks its name with
// the case of each ASCII letter drawn at random, and a reply must carry
// the question exactly as asked, case included. A forged reply must then
// guess one bit per letter besides the ID and the port. The client's own
// case is written back into its answer (entry.write), as for any answer.
//
// A server that does not keep the case fails every answer this way. One
// that answers twice in a row with the name in another case (the rest of
// the reply matching, its cookie too) is marked: it is asked in lower
// case, its replies compared without regard to case, and the mark is
// reported once (CaseObserver).

// caseMissesToMark is how many replies in a row with the name in another
// case mark a server as not keeping case.
const caseMissesToMark = 2

// CaseObserver is implemented by observers that want to know when a server
// is found not to keep the question's case (reported once per server).
type CaseObserver interface {
	CaseNotKept(server string)
}

// randomizeCase sets the case of each ASCII letter of the wire name at
// random, from ids' cryptographic bytes.
func randomizeCase(name []byte, ids *idBuffer) {
	var bits uint64
	left := 0
	for i, c := range name {
		l := c | 0x20
		if l < 'a' || l > 'z' {
			continue
		}
		if left == 0 {
			bits, left = ids.next64(), 64
		}
		if bits&1 != 0 {
			name[i] = l &^ 0x20
		} else {
			name[i] = l
		}
		bits >>= 1
		left--
	}
}

// lowerCase lowers the ASCII letters of a wire name. Label lengths are
// below 'A': only letters change.
func lowerCase(name []byte) {
	for i, c := range name {
		if 'A' <= c && c <= 'Z' {
			name[i] = c + 'a' - 'A'
		}
	}
}

// next64 returns 64 random bits (see newID).
func (ids *idBuffer) next64() uint64 {
	if ids.next+8 > len(ids.b) {
		rand.Read(ids.b[:])
		ids.next = 0
	}
	v := binary.BigEndian.Uint64(ids.b[ids.next:])
	ids.next += 8
	return v
}

// caseDiffered notes a reply from u that matched but for the case of its
// name; the second in a row marks u (reported to the observer once).
func (e *Engine) caseDiffered(u *upstream) {
	if u.caseMisses.Add(1) < caseMissesToMark || !u.caseless.CompareAndSwap(false, true) {
		return
	}
	if o, ok := e.observer.(CaseObserver); ok {
		o.CaseNotKept(u.key)
	}
}

// caseKept notes a reply from u whose name kept the case it was asked in.
func caseKept(u *upstream) {
	if u.caseMisses.Load() != 0 {
		u.caseMisses.Store(0)
	}
}

// restoreCase writes the client's name (qname, its wire form) over every
// copy of the name as the query asked it (in random case) in reply: the
// question and the owner names a server wrote out in full rather than
// pointing to the question. The reply then reads as if asked in the
// client's case, as it did before 0x20. A random-case name is found
// nowhere else by chance.
func restoreCase(reply, query, qname []byte) {
	qe := questionEnd(query)
	if qe < 0 || len(qname) != qe-4-dnswire.HeaderLen {
		return
	}
	asked := query[dnswire.HeaderLen : qe-4]
	if string(asked) == string(qname) {
		return
	}
	for i := dnswire.HeaderLen; i < len(reply); {
		j := bytes.Index(reply[i:], asked)
		if j < 0 {
			return
		}
		copy(reply[i+j:], qname)
		i += j + len(asked)
	}
}
