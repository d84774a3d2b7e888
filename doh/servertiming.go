package doh

import (
	"net/http"
	"strconv"

	"github.com/dohfwd/dohfwd/engine"
)

// The Server-Timing header (W3C Server Timing) of a DoH answer says where
// the time went, for a browser's devtools and curl -v:
//
//	Server-Timing: source;desc=upstream, attempts;desc=2, upstream;dur=12.345
//
// source is cache, local (RFC 6761 names, hosts), shared (an identical
// question upstream at the same time answered it) or upstream; attempts
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
	switch {
	case r.CacheHit:
		return serverTimingCache
	case r.Shared:
		return serverTimingShared
	case r.Result == engine.ResultLocal:
		return serverTimingLocal
	}
	var b [80]byte
	return []string{string(appendServerTiming(b[:0], "upstream", r.Attempts, r.Upstream.Microseconds()))}
}

func appendServerTiming(b []byte, source string, attempts int, micros int64) []byte {
	b = append(b, "source;desc="...)
	b = append(b, source...)
	b = append(b, ", attempts;desc="...)
	b = strconv.AppendInt(b, int64(attempts), 10)
	b = append(b, ", upstream;dur="...)
	return strconv.AppendFloat(b, float64(micros)/1000, 'f', -1, 64)
}

// setServerTiming adds the Server-Timing header of a resolved answer.
func setServerTiming(h http.Header, r engine.Response) { h["Server-Timing"] = ServerTiming(r) }
