package doh

import (
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"

	"github.com/dohfwd/dohfwd/engine"
)

// W3C Trace Context for DoH requests: a request's traceparent header puts
// its question in the caller's trace; without one (or with one that does
// not parse) the question gets a trace of its own. Either way the
// question's log events carry the trace-id, and the answer says which
// trace and span it was in a traceresponse header (Trace Context Level 2):
//
//	traceparent:   00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
//	traceresponse: 00-4bf92f3577b34da6a3ce929d0e0e4736-<this server's span>-01

// traceparentLen is the length of a version 00 traceparent.
const traceparentLen = 55

// NewTrace is RequestTrace for any transport: traceparent is the
// request's traceparent header values (none, one, or more: more than one
// is not believed).
func NewTrace(traceparent []string) engine.Trace {
	var t engine.Trace
	if len(traceparent) == 1 {
		t.HasParent = parseTraceparent(traceparent[0], &t)
	}
	if !t.HasParent {
		t = engine.Trace{}
		for t.ID == ([16]byte{}) {
			binary.BigEndian.PutUint64(t.ID[:8], rand.Uint64())
			binary.BigEndian.PutUint64(t.ID[8:], rand.Uint64())
		}
	}
	for t.Span == ([8]byte{}) {
		binary.BigEndian.PutUint64(t.Span[:], rand.Uint64())
	}
	return t
}

// parseTraceparent reads v into t's ID, Parent and Flags, as the W3C
// recommendation says: lowercase hex only, neither ID nor parent all
// zeros, version ff invalid, a future version read as 00 when what
// follows is set off by a dash.
func parseTraceparent(v string, t *engine.Trace) bool {
	if len(v) < traceparentLen || v[2] != '-' || v[35] != '-' || v[52] != '-' {
		return false
	}
	var version [1]byte
	if !lowerHex(version[:], v[0:2]) || version[0] == 0xff {
		return false
	}
	if version[0] == 0 && len(v) != traceparentLen || len(v) > traceparentLen && v[traceparentLen] != '-' {
		return false
	}
	var flags [1]byte
	if !lowerHex(t.ID[:], v[3:35]) || !lowerHex(t.Parent[:], v[36:52]) || !lowerHex(flags[:], v[53:55]) {
		return false
	}
	t.Flags = flags[0]
	return t.ID != [16]byte{} && t.Parent != [8]byte{}
}

// lowerHex decodes s (2*len(dst) characters) into dst, refusing
// uppercase.
func lowerHex(dst []byte, s string) bool {
	for i := range dst {
		hi, ok1 := lowerNibble(s[2*i])
		lo, ok2 := lowerNibble(s[2*i+1])
		if !ok1 || !ok2 {
			return false
		}
		dst[i] = hi<<4 | lo
	}
	return true
}

func lowerNibble(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// TraceResponse is the traceresponse header value for t: its trace-id,
// this server's span and the flags.
func TraceResponse(t *engine.Trace) []string {
	var b [traceparentLen]byte
	return []string{string(AppendTraceResponse(b[:0], t))}
}

// AppendTraceResponse appends t's traceresponse value to b.
func AppendTraceResponse(b []byte, t *engine.Trace) []byte {
	b = append(b, "00-"...)
	b = hex.AppendEncode(b, t.ID[:])
	b = append(b, '-')
	b = hex.AppendEncode(b, t.Span[:])
	b = append(b, '-')
	return hex.AppendEncode(b, []byte{t.Flags})
}
