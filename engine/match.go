package engine

import (
	"encoding/binary"

	"github.com/dohfwd/dohfwd/engine/dnswire"
)

// questionEnd returns the offset just past the single question of a wire
// message, or -1 if the message is too short or the name is compressed.
// Only the header and question are read: the rest may be anything.
func questionEnd(m []byte) int {
	off := dnswire.HeaderLen
	for {
		if off >= len(m) {
			return -1
		}
		l := int(m[off])
		if l == 0 {
			off++
			break
		}
		if l&0xC0 != 0 { // a pointer or reserved label type
			return -1
		}
		off += 1 + l
	}
	off += 4 // type and class
	if off > len(m) {
		return -1
	}
	return off
}

// match is how a reply compares with the query it may answer.
type match uint8

const (
	matchNone     match = iota // not an answer to the query
	matchExact                 // an answer to it
	matchCaseOnly              // an answer but for the case of its name (0x20)
)

// replyMatches reports whether reply answers query: QR set, the same ID,
// opcode QUERY and the same single question (type and class exactly; the
// name exactly when exactCase, else without regard to ASCII case). query
// is the engine's own wire query, so its question is well formed; reply
// is anything at all.
func replyMatches(reply, query []byte, exactCase bool) match {
	if len(reply) < dnswire.HeaderLen || len(query) < dnswire.HeaderLen {
		return matchNone
	}
	if reply[0] != query[0] || reply[1] != query[1] {
		return matchNone
	}
	if reply[2]&0x80 == 0 || (reply[2]>>3)&0x0F != 0 { // QR, opcode
		return matchNone
	}
	if binary.BigEndian.Uint16(reply[4:]) != 1 {
		return matchNone
	}
	qe := questionEnd(query)
	re := questionEnd(reply)
	if qe < 0 || re != qe || string(reply[re-4:re]) != string(query[qe-4:qe]) {
		return matchNone
	}
	rn, qn := reply[dnswire.HeaderLen:re-4], query[dnswire.HeaderLen:qe-4]
	if string(rn) == string(qn) {
		return matchExact
	}
	if !equalFoldASCII(rn, qn) {
		return matchNone
	}
	if exactCase {
		return matchCaseOnly
	}
	return matchExact
}

// equalFoldASCII compares wire names folding only
// ASCII letters, as DNS names compare. Label lengths are below 'A', so they
// compare exactly.
func equalFoldASCII(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x == y {
			continue
		}
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
