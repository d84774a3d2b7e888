package doh

import (
	"strconv"

	"github.com/dohfwd/dohfwd/engine"
)

// The Server-Timing header (W3C Server Timing) of a DoH answer says where
// the time went, for a browser's devtools and curl -v:
//
//	Server-Timing: source;desc=upstream, attempts;desc=2, upstream;dur=12.345
//
// source is cache, local (RFC 6761 names, hosts), shared (an identical
// question upstream at the same time answered it), stale (an expired
// cache entry, RFC 8767, after the attempts or the client response timer)
// or upstream; attempts
// the question's own upstream attempts; upstream;dur their total time in
// milliseconds.

// Header values of the answers that spent no attempt, made once.
var (
	serverTimingCache  = []string{"source;desc=cache, attempts;desc=0, upstream;dur=0"}
	serverTimingLocal  = []string{"source;desc=local, attempts;desc=0, upstream;dur=0"}
	serverTimingShared = []string{"source;desc=shared, attempts;desc=0, upstream;dur=0"}
)

// ServerTiming returns the Server-Timing header value for r.
func ServerTiming(r engine.Response) []string {
	if v := fixedServerTiming(r); v != nil {
		return v
	}
	var b [80]byte
	return []string{string(AppendServerTiming(b[:0], r))}
}

// fixedServerTiming is the value made once for an answer that spent no
// attempt, or nil.
func fixedServerTiming(r engine.Response) []string {
	switch {
	case r.CacheHit:
		return serverTimingCache
	case r.Shared:
		return serverTimingShared
	case r.Result == engine.ResultLocal:
		return serverTimingLocal
	}
	return nil
}

// AppendServerTiming appends the Server-Timing value of an answer from
// upstream, or a stale one, to b.
func AppendServerTiming(b []byte, r engine.Response) []byte {
	if r.Result == engine.ResultStale {
		b = append(b, "source;desc=stale, attempts;desc="...)
	} else {
		b = append(b, "source;desc=upstream, attempts;desc="...)
	}
	b = strconv.AppendInt(b, int64(r.Attempts), 10)
	b = append(b, ", upstream;dur="...)
	return appendMillis(b, r.Upstream.Microseconds())
}

// appendMillis appends us microseconds as milliseconds in the shortest
// decimal form: what strconv.AppendFloat(b, float64(us)/1000, 'f', -1, 64)
// writes (12.345, 6000, 0.5), without its search for the shortest form:
// at these magnitudes three decimals always round-trip and none shorter do.
func appendMillis(b []byte, us int64) []byte {
	if us < 0 {
		b = append(b, '-')
		us = -us
	}
	b = strconv.AppendInt(b, us/1000, 10)
	frac := us % 1000
	if frac == 0 {
		return b
	}
	digits := [3]byte{byte('0' + frac/100), byte('0' + frac/10%10), byte('0' + frac%10)}
	n := 3
	for digits[n-1] == '0' {
		n--
	}
	return append(append(b, '.'), digits[:n]...)
}
