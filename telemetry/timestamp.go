package telemetry

import (
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// timestampHook adds the "time" field to every event, as zerolog's
// Timestamp does and in the same form (RFC 3339 with nanoseconds, trailing
// zeros trimmed, the clock's zone), but writes it from a text made once a
// second: at level info a forwarded question logs two events, and
// formatting their times was a fifth of their cost.
type timestampHook struct{}

func (timestampHook) Run(e *zerolog.Event, _ zerolog.Level, _ string) {
	if hasOwnTime(e) {
		return
	}
	var b [48]byte
	e.Bytes(zerolog.TimestampFieldName, appendRFC3339Nano(b[:0], time.Now()))
}

// secondText is the part of a timestamp that changes once a second: the
// date and time of day, and the zone.
type secondText struct {
	unix int64
	loc  *time.Location
	date []byte // 2006-01-02T15:04:05
	zone []byte // Z or -07:00
}

var lastSecond atomic.Pointer[secondText]

// appendRFC3339Nano appends t as t.Format(time.RFC3339Nano) does.
func appendRFC3339Nano(dst []byte, t time.Time) []byte {
	s := lastSecond.Load()
	if s == nil || s.unix != t.Unix() || s.loc != t.Location() {
		s = &secondText{unix: t.Unix(), loc: t.Location(),
			date: t.AppendFormat(nil, "2006-01-02T15:04:05"), zone: t.AppendFormat(nil, "Z07:00")}
		lastSecond.Store(s)
	}
	dst = append(dst, s.date...)
	if ns := t.Nanosecond(); ns != 0 {
		dst = appendFraction(dst, uint32(ns))
	}
	return append(dst, s.zone...)
}

// appendFraction appends ns (1 to 999 999 999) as a second's fraction: a
// dot, nine digits, trailing zeros trimmed; two digits at a time.
func appendFraction(dst []byte, ns uint32) []byte {
	var f [10]byte
	f[0], f[1] = '.', byte('0'+ns/1e8)
	ns %= 1e8
	for i := 8; i >= 2; i -= 2 {
		d := ns % 100 * 2
		f[i], f[i+1] = digitPairs[d], digitPairs[d+1]
		ns /= 100
	}
	n := len(f)
	for f[n-1] == '0' {
		n--
	}
	return append(dst, f[:n]...)
}

const digitPairs = "00010203040506070809101112131415161718192021222324252627282930313233343536373839" +
	"40414243444546474849505152535455565758596061626364656667686970717273747576777879" +
	"8081828384858687888990919293949596979899"
