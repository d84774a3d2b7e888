package doh

import (
	"context"
	"net/netip"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/wiretap"
)

// Resolver answers one checked query (QR clear, opcode QUERY, exactly one
// question) given as bytes, appending the client's reply to dst as
// Response.Wire: the client's ID, padded when the query was, with its
// rcode and TTL for Cache-Control; an empty Wire when it cannot read the
// query. ctx is the client's budget: it ends when the client goes away.
// *engine.Engine and *ddr.Resolver satisfy it; the RFC 8484 path then
// neither unpacks nor packs an answer.
type Resolver interface {
	Resolve(ctx context.Context, query, dst []byte) engine.Response
}

const (
	// DefaultPath is where RFC 8484 queries are served unless
	// Options.Path says otherwise.
	DefaultPath = "/dns-query"
	// JSONPath always serves the JSON form.
	JSONPath = "/resolve"
	// MaxMessageSize is the largest DNS message a POST body may carry.
	MaxMessageSize = 65535
	// StatusClientClosed is the status an [Exchange] reports when the
	// client went away before its answer was ready; nothing is written.
	StatusClientClosed = 499
)

// Media types.
const (
	MediaTypeDNS  = "application/dns-message"
	MediaTypeJSON = "application/dns-json"
)

// Options configure a handler. The zero value serves DefaultPath and
// believes no forwarding headers.
type Options struct {
	// Path is where RFC 8484 queries are served; "" means DefaultPath.
	// The JSON form is served there too (with Accept: application/dns-json)
	// and always at JSONPath.
	Path string
	// TrustedProxies are the peers whose X-Forwarded-For or Forwarded
	// header is believed when working out the client's address.
	TrustedProxies []netip.Prefix
	// Observe, if set, is called once per request after the response is
	// written, for metrics and logs. It must not block (x.Response.Wire
	// is cleared once written).
	Observe func(x Exchange)
	// Setup, if set, serves the device setup pages: GET / from a browser
	// (Accept: text/html) and SetupProfilePath (see package setup).
	Setup SetupPages
	// ServerTiming adds a Server-Timing header to each resolved answer:
	// its source, attempts and upstream time (see [ServerTiming]).
	ServerTiming bool
	// TraceContext reads W3C traceparent (or makes a trace) for each
	// request, hands it to the resolver with the question, and answers
	// with traceresponse (see [RequestTrace]).
	TraceContext bool
	// Admit, if set, is asked for each question about to be resolved,
	// with the client's address; when it refuses, the client gets 429
	// with Retry-After and the resolver is not asked. The resolver's
	// context names the client (engine.WithClient) either way, for its
	// per-client share of transactions and a scope's ECS add.
	Admit func(client netip.Addr) (ok bool, retryAfter time.Duration)
	// Wiretap, if set, is handed each question's query and answer
	// (dnstap's CLIENT_QUERY and CLIENT_RESPONSE); nil: none.
	Wiretap wiretap.Tap
	// Oblivious, if set, makes the handler an ODoH target (RFC 9230):
	// application/oblivious-dns-message POSTed to Path is opened with
	// its keys, resolved as any DoH question is (for no client: the
	// peer is a relay) and answered sealed; its keys are served at
	// odoh.ConfigsPath.
	Oblivious ObliviousTarget
	// Relay, if set, serves the ODoH relay at RelayPath.
	Relay ObliviousRelay
}

// Format is the form of a request.
type Format uint8

const (
	FormatWire Format = iota // RFC 8484 application/dns-message
	FormatJSON               // application/dns-json
)

func (f Format) String() string {
	switch f {
	case FormatJSON:
		return "json"
	case FormatOblivious:
		return "odoh"
	}
	return "wire"
}

// Exchange describes one request at its end.
type Exchange struct {
	Method string
	Proto  string // "HTTP/2.0", "HTTP/1.1"
	Format Format
	// Status is the HTTP status sent, or StatusClientClosed.
	Status int
	// Rcode is the DNS rcode of the response sent; -1 when the answer was
	// an HTTP error and carried no DNS message.
	Rcode int
	// Problem says what was wrong with the request, for a 4xx status or a
	// DNS error made here (FORMERR, NOTIMP, BADVERS); "" otherwise.
	Problem string
	// Peer is the TCP peer; ClientIP the client as worked out from
	// trusted forwarding headers (the peer when there are none).
	Peer     netip.AddrPort
	ClientIP netip.Addr
	// QName and QType are the question, when one was read.
	QName string
	QType uint16
	// Resolved says whether the resolver was asked; Response is its answer.
	Resolved bool
	Response engine.Response
	// Start is when the request was read; Duration how long it took
	// until its response was ready (until the resolver answered, when it
	// did: Response.Answered).
	Start    time.Time
	Duration time.Duration
	// Trace is the request's trace, with Options.TraceContext.
	Trace engine.Trace
	// Relayed says an ODoH request came to the relay (Format is then
	// FormatOblivious, and ClientIP must not be logged beside anything
	// of the message); ODoHFailure is why an ODoH request failed (the
	// ODoH* reasons), "" when it did not.
	Relayed     bool
	ODoHFailure string
}
