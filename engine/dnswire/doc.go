// Package dnswire reads and writes DNS messages in their wire form
// (RFC 1035 §4, RFC 6891 for EDNS). It is the engine's own codec: small
// enough that the edge module links it instead of github.com/miekg/dns,
// whose client and server bring crypto/tls with them. It holds what a
// forwarder needs (headers, questions, names, the records it makes and the
// presentation text of the ones it reads), not a general DNS library.
//
// # Why a codec beside miekg/dns
//
// A forwarder reads every reply it passes on but changes little of it
// (the ID, TTLs, an OPT record), so the codec reads in place: a Parser
// walks a message's records as offsets into its bytes and a Builder
// appends to a caller's buffer, where miekg/dns unpacks every record into
// a Go value and packs it back. The per-question path then allocates
// nothing to read a reply or check a query. miekg/dns stays where a whole
// message is wanted as values (the Do53 and DoT front ends, tests), and as
// the reference the codec is fuzzed against (FuzzParserAsMiekg).
//
// The figures, from one run on a 2-core machine shared with other work
// (ratios within the run; codec_bench_test.go):
//
//	go test -run '^$' -bench Codec -benchmem -count=3 ./engine/dnswire/
//
//	reading a 5-record reply as the engine does   0.8-1.0 µs, 0 allocs;  miekg/dns Unpack 9.7-15 µs, 27 allocs (12-15x)
//	the front ends' query check (CheckQuery)      0.6-0.75 µs, 0 allocs; miekg/dns Unpack 0.9-1.5 µs, 5 allocs (1.6-2x)
//	building a query with EDNS                    0.45-0.97 µs, 1 alloc; miekg/dns Pack 1.3-2.0 µs, 4 allocs (2-3x)
//
// # One query check
//
// Every front end (DoH in the wire and JSON forms, DoT, Do53, the admin
// /explain) accepts or refuses a question by CheckQuery and, for a
// question given as text, ParseQuestion (query.go): one list of refused
// question types (RefusedType), one reading of names and types.
package dnswire
