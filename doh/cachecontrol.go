package doh

import "strconv"

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
	return "max-age=" + strconv.FormatUint(uint64(s), 10)
}
