package doh

import (
	"strconv"

	"github.com/miekg/dns"
)

// maxAge is how long an HTTP cache may keep a response (RFC 8484 section
// 5.1), and whether it may keep it at all:
//   - NOERROR with answers: the smallest TTL in the answer and authority
//     sections (OPT is not a record and does not count);
//   - NXDOMAIN, and NOERROR without answers (NODATA): the negative TTL of
//     RFC 2308, the smaller of the SOA's TTL and its MINIMUM; with no SOA
//     the answer is not kept (RFC 2308 section 5);
//   - anything else (SERVFAIL, which includes the engine's unavailable,
//     REFUSED, FORMERR, NOTIMP, ...) says something about this moment or
//     this request, not about the name: not kept.
func maxAge(m *dns.Msg) (seconds uint32, cacheable bool) {
	switch m.Rcode {
	case dns.RcodeSuccess:
		if len(m.Answer) > 0 {
			return minTTL(m), true
		}
		return negativeTTL(m)
	case dns.RcodeNameError:
		return negativeTTL(m)
	}
	return 0, false
}

func minTTL(m *dns.Msg) uint32 {
	ttl := ^uint32(0)
	for _, section := range [2][]dns.RR{m.Answer, m.Ns} {
		for _, rr := range section {
			if h := rr.Header(); h.Rrtype != dns.TypeOPT && h.Ttl < ttl {
				ttl = h.Ttl
			}
		}
	}
	return ttl
}

func negativeTTL(m *dns.Msg) (uint32, bool) {
	for _, rr := range m.Ns {
		if soa, ok := rr.(*dns.SOA); ok {
			return min(soa.Hdr.Ttl, soa.Minttl), true
		}
	}
	return 0, false
}

// smallMaxAges holds the Cache-Control values of common small TTLs, so
// most responses set the header without allocating.
var smallMaxAges = func() []string {
	v := make([]string, 301)
	for i := range v {
		v[i] = "max-age=" + strconv.Itoa(i)
	}
	return v
}()

// cacheControl is the Cache-Control header value for a response.
func cacheControl(m *dns.Msg) string {
	s, ok := maxAge(m)
	if !ok {
		return "no-store"
	}
	if int(s) < len(smallMaxAges) {
		return smallMaxAges[s]
	}
	return "max-age=" + strconv.FormatUint(uint64(s), 10)
}
