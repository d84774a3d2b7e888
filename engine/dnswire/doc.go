// Package dnswire reads and writes DNS messages in their wire form
// (RFC 1035 §4, RFC 6891 for EDNS). It is the engine's own codec: small
// enough that the edge module links it instead of github.com/miekg/dns,
// whose client and server bring crypto/tls with them. It holds what a
// forwarder needs (headers, questions, names, the records it makes and the
// presentation text of the ones it reads), not a general DNS library.
package dnswire
