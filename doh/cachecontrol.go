package doh

import (
	"strconv"
	"sync/atomic"
)

// smallMaxAges holds the Cache-Control values of common small TTLs, so
// most responses set the header without allocating.
var smallMaxAges = func() []string {
	v := make([]string, 301)
	for i := range v {
		v[i] = "max-age=" + strconv.Itoa(i)
	}
	return v
}()

// cacheControlValue is the Cache-Control header value for an answer whose
// TTL is s, or no-store when it may not be kept: how long an HTTP cache
// may keep a response (RFC 8484 section 5.1). The rule is the engine's,
// the one its cache keeps answers by (engine.WireTTL, which gives s and
// cacheable with every reply):
//   - NOERROR with answers: the smallest TTL in the answer and authority
//     sections (OPT is not a record and does not count);
//   - NXDOMAIN, and NOERROR without answers (NODATA): the negative TTL of
//     RFC 2308, the smaller of the SOA's TTL and its MINIMUM; with no SOA
//     the answer is not kept (RFC 2308 section 5);
//   - a stale answer (RFC 8767), positive or negative: the stale TTL
//     every record of it carries (engine's staleReplyTTL);
//   - anything else (SERVFAIL, which includes the engine's unavailable,
//     REFUSED, FORMERR, NOTIMP, ...) says something about this moment or
//     this request, not about the name: not kept.
func cacheControlValue(s uint32, cacheable bool) string {
	if !cacheable {
		return "no-store"
	}
	if int(s) < len(smallMaxAges) {
		return smallMaxAges[s]
	}
	// Larger TTLs repeat too (3600, 86400: the zone's own values): the
	// last value made for each of a few slots is kept.
	slot := &largeMaxAges[s%uint32(len(largeMaxAges))]
	if v := slot.Load(); v != nil && v.seconds == s {
		return v.text
	}
	v := &maxAgeText{seconds: s, text: "max-age=" + strconv.FormatUint(uint64(s), 10)}
	slot.Store(v)
	return v.text
}

// maxAgeText is a Cache-Control value made for a TTL over 300 seconds.
type maxAgeText struct {
	seconds uint32
	text    string
}

var largeMaxAges [64]atomic.Pointer[maxAgeText]
