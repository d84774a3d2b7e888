// Package dnsserver serves DNS over TLS (RFC 7858) and plain DNS over UDP
// and TCP from the same [Resolver] as the DoH front end.
//
// A stream connection (TCP, or TLS for DoT) carries pipelined queries: each
// is resolved on its own and answered as soon as its answer is ready, out of
// order (RFC 7766, section 6.2.1.1), with at most Limits.MaxInFlight
// questions open per connection. A connection that sends something that is
// not a DNS query, a length past Limits.MaxQuerySize, or a query that
// stalls half-sent past Limits.ReadTimeout is closed; the others are not
// affected. Padded queries get padded answers (RFC 8467). Shutdown stops
// accepting, answers the questions in flight and then closes.
package dnsserver
