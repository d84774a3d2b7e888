package telemetry

import (
	"encoding/binary"
	"math/bits"
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
	date [19]byte // 2006-01-02T15:04:05
	zone []byte   // Z or -07:00
}

var lastSecond atomic.Pointer[secondText]

// appendRFC3339Nano appends t as t.Format(time.RFC3339Nano) does.
func appendRFC3339Nano(dst []byte, t time.Time) []byte {
	s := lastSecond.Load()
	if s == nil || s.unix != t.Unix() || s.loc != t.Location() {
		s = &secondText{unix: t.Unix(), loc: t.Location(), zone: t.AppendFormat(nil, "Z07:00")}
		if d := t.AppendFormat(s.date[:0], "2006-01-02T15:04:05"); len(d) != len(s.date) {
			return t.AppendFormat(dst, time.RFC3339Nano) // a year of other than four digits
		}
		lastSecond.Store(s)
	}
	// The date in pieces of constant length the compiler copies inline
	// (no memmove call for 16 bytes or fewer).
	dst = append(append(dst, s.date[:16]...), s.date[16:]...)
	if ns := t.Nanosecond(); ns != 0 {
		dst = appendFraction(dst, uint32(ns))
	}
	if len(s.zone) == 1 { // Z
		return append(dst, s.zone[0])
	}
	return append(dst, s.zone...)
}

// appendFraction appends ns (1 to 999 999 999) as a second's fraction: a
// dot, nine digits, trailing zeros trimmed. The last eight digits are
// made together in one word (SWAR): two lanes of four digits, then four
// of two, then eight of one, a multiply and a shift per step for all
// lanes (x/100 as x*10486>>20, exact below 43 699; x/10 as x*103>>10,
// exact below 179), the first digit in the lowest byte.
func appendFraction(dst []byte, ns uint32) []byte {
	var f [10]byte
	f[0], f[1] = '.', byte('0'+ns/1e8)
	rest := uint64(ns % 1e8)
	x := rest/1e4 | rest%1e4<<32
	hundreds := x * 10486 >> 20 & 0x0000007f_0000007f
	x = hundreds | (x-hundreds*100)<<16
	tens := x * 103 >> 10 & 0x000f000f_000f000f
	digits := tens | (x-tens*10)<<8
	binary.LittleEndian.PutUint64(f[2:], digits+0x30303030_30303030)
	// Trailing zeros are the top bytes of digits that are zero; all
	// eight at most, as the first digit is not then.
	dst = append(dst, f[:]...) // all ten, copied inline, then the zeros taken off
	return dst[:len(dst)-bits.LeadingZeros64(digits)/8]
}
