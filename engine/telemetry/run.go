package telemetry

import (
	"encoding/binary"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/dohfwd/dohfwd/engine"
)

// Per-question fields as one run of raw JSON. Each zerolog field costs its
// key's encoding (an escape scan of a constant) besides its value's; the
// fields an "attempt" or "question" event writes per question (question,
// qname, rtt_ms or duration_ms, trace_id, span_id, time) are instead
// gathered here as the bytes zerolog would write for them, and handed to
// zerolog as the value of the first one (Event.RawJSON): one key encoded
// by zerolog instead of six. A value only zerolog should write (a name that
// needs JSON escaping, a list of traces) ends the run; the next field
// starts another.

// runSize is the room a run has on the stack: the longest name (253
// bytes) with every other field of either event, ids of a parent and a
// joined trace included.
const runSize = 512

// startRun begins an event's run in dst with its first fields: question,
// qname and the time the question or attempt took (under msKey). It
// returns the event, the run and the key zerolog is to write for the run.
// A name that needs escaping (the engine reports printable ASCII) is left
// to zerolog, with what precedes it, and the run starts after it.
func startRun(e *zerolog.Event, dst []byte, question uint64, qname, msKey string, d time.Duration) (*zerolog.Event, string, []byte) {
	dst = strconv.AppendUint(dst, question, 10)
	if !plainJSON(qname) {
		e = e.RawJSON("question", dst).Str("qname", qname)
		return e, msKey, appendMillisValue(dst[:0], d)
	}
	dst = append(appendKey(dst, "qname"), '"')
	dst = append(append(dst, qname...), '"')
	return e, "question", appendMillisValue(appendKey(dst, msKey), d)
}

// appendQuestion appends an event's first own fields but one: question
// and qname (which needs no escaping: plainJSON). The caller appends the
// time the question or attempt took with appendMillisValue, after its key
// as a constant (copied inline).
func appendQuestion(dst []byte, question uint64, qname string) []byte {
	dst = strconv.AppendUint(append(dst, `,"question":`...), question, 10)
	dst = append(append(dst, `,"qname":"`...), qname...)
	return append(dst, '"')
}

// appendKey appends a key, as zerolog writes it after another field. The
// keys here are plain ASCII: they need no escaping.
func appendKey(dst []byte, k string) []byte {
	dst = append(dst, ',', '"')
	dst = append(dst, k...)
	return append(dst, '"', ':')
}

// plainJSON reports whether s is written in JSON as it is: printable
// ASCII without '"' or '\\'. Eight bytes at a time: a byte is not plain
// when it is below 0x20, at or above 0x7f, or equal to '"' or '\\'.
func plainJSON(s string) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	for len(s) >= 8 {
		x := uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
			uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
		quote, backslash := x^(ones*'"'), x^(ones*'\\')
		// A byte is flagged (its top bit set) when below 0x20, when 0x7f
		// or above (0x80 and above are flagged by x's own top bit), or
		// when zero after the xor with '"' or '\\'.
		bad := (x - ones*0x20) | (x + ones*(0x80-0x7f)) | x |
			(quote-ones)&^quote | (backslash-ones)&^backslash
		if bad&highs != 0 {
			return false
		}
		s = s[8:]
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// appendMillisValue appends d in milliseconds, as Float64(k,
// float64(d.Microseconds())/1000) writes it (microsecond precision, no
// trailing zeros).
func appendMillisValue(dst []byte, d time.Duration) []byte {
	us := d.Microseconds()
	if us < 0 || us >= 1e12 { // a sign, or too large for appendMillis: strconv, as zerolog calls it
		return strconv.AppendFloat(dst, float64(us)/1000, 'f', zerolog.FloatingPointPrecision, 64)
	}
	return appendMillis(dst, us)
}

// appendHex appends id as zerolog's Hex writes it: lowercase, two digits
// a byte, quoted. Eight bytes at a time (hexDigits8), as the ids of a
// trace are 8 and 16 bytes long.
func appendHex(dst, id []byte) []byte {
	dst = append(dst, '"')
	for len(id) >= 8 {
		v := binary.BigEndian.Uint64(id)
		dst = binary.BigEndian.AppendUint64(dst, hexDigits8(uint32(v>>32)))
		dst = binary.BigEndian.AppendUint64(dst, hexDigits8(uint32(v)))
		id = id[8:]
	}
	for _, v := range id {
		dst = append(dst, hexDigits[v>>4], hexDigits[v&0x0f])
	}
	return append(dst, '"')
}

const hexDigits = "0123456789abcdef"

// hexDigits8 returns the eight lowercase hex digits of v, the first in the
// top byte: each nibble is spread into a byte of its own, then turned into
// '0'-'9' or 'a'-'f' all at once.
func hexDigits8(v uint32) uint64 {
	x := uint64(v)
	x = (x | x<<16) & 0x0000ffff0000ffff
	x = (x | x<<8) & 0x00ff00ff00ff00ff
	x = (x | x<<4) & 0x0f0f0f0f0f0f0f0f
	letters := (x + 0x0606060606060606) >> 4 & 0x0101010101010101 // 1 in each byte above 9
	return x + 0x3030303030303030 + letters*('a'-'0'-10)
}

// appendTrace appends a question's trace: trace_id, span_id (this
// server's span) and parent_id (the caller's span, when it sent one).
// Keys and quotes are appended as constants, which the compiler copies
// inline (no memmove call for 16 bytes or fewer).
func appendTrace(dst []byte, t *engine.Trace) []byte {
	if t == nil {
		return dst
	}
	dst = appendHexDigits(append(dst, `,"trace_id":"`...), t.ID[:8])
	dst = appendHexDigits(dst, t.ID[8:])
	dst = appendHexDigits(append(dst, `","span_id":"`...), t.Span[:])
	if t.HasParent {
		dst = appendHexDigits(append(dst, `","parent_id":"`...), t.Parent[:])
	}
	return append(dst, '"')
}

// appendHexDigits appends the 16 hex digits of id's 8 bytes, unquoted.
func appendHexDigits(dst, id []byte) []byte {
	v := binary.BigEndian.Uint64(id)
	dst = binary.BigEndian.AppendUint64(dst, hexDigits8(uint32(v>>32)))
	return binary.BigEndian.AppendUint64(dst, hexDigits8(uint32(v)))
}

// appendTime appends the event's time, quoted, as timestampHook would
// have written it, from t (the engine's reading) or, when the event has
// none, from the clock.
func appendTime(dst []byte, t time.Time) []byte {
	if t.IsZero() {
		t = time.Now()
	}
	return append(appendRFC3339Nano(append(dst, '"'), t), '"')
}

// appendTimeField appends the event's time field: its key and
// appendTime's value.
func appendTimeField(dst []byte, t time.Time) []byte {
	if t.IsZero() {
		t = time.Now()
	}
	if zerolog.TimestampFieldName == "time" { // the key as a constant: copied inline
		dst = append(dst, `,"time":"`...)
	} else {
		dst = append(appendKey(dst, zerolog.TimestampFieldName), '"')
	}
	return append(appendRFC3339Nano(dst, t), '"')
}
