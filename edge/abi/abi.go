// Package abi is the contract between dohfwd's WebAssembly module and its
// hosts: the names of the imports and exports, the socket error codes, the
// events a host hands in, and the byte layout of a DoH request and response
// as they cross the module's memory. The module (edge/module), the wazero
// host (edge/host) and the JavaScript glue (edge/workers: worker.mjs,
// sockets.mjs, rfc8484.mjs) all follow it.
//
// # The module never waits in an import
//
// One instance holds one engine and answers many requests at once, as the
// native server does: its goroutines run as natively, and only its socket
// layer differs. The host drives it with one export, dohfwd_poll, called
// with a batch of events (requests, cancels, socket results). The module
// applies them, runs its goroutines until every one of them waits on the
// host (or on a timer), and returns the answers finished meanwhile and the
// next deadline: the time by which the host must call dohfwd_poll again,
// events or not. Between calls no module code runs.
//
// A goroutine that needs the network calls an import, and none of them
// waits: sock_open opens (a TCP connect goes on in the host; the module
// sends its query and names its read at once, in the same poll, and the
// host carries both out once connected; only a failed connect sends an
// EventConnected), sock_send writes (a failure the host learns later is
// reported by the next EventRead of that socket), sock_recv names a socket
// the module waits on (one read, of at most max bytes, answered by an
// EventRead when the socket is readable, fails, or its deadline passes)
// and sock_close releases it (a read or connect still pending is dropped:
// no event follows for a closed socket). The module keeps the deadlines
// too: a read or connect still unanswered at its deadline fails with
// engine.ErrTimeout at the first dohfwd_poll after it, so a host that only
// calls back at the deadline it was given needs no timers of its own.
//
// # Two kinds of request
//
// A host hands in either a whole HTTP request (EventRequest), which the
// module answers with its own DoH handler, or only a DNS question
// (EventQuery), which it answers with its engine alone. The Workers glue
// sends whole requests but for plain RFC 8484 ones (see Front). The wazero host runs the DoH
// front end natively (package doh over the instance: HTTP/2, the request's
// checks, per-client admission, Server-Timing, the JSON form) and sends
// questions: Go compiled to wasm runs several times slower than natively,
// and the front end was a large share of the module's time. The engine
// (cache, coalescing, demotion marks, attempts) stays in the module, one
// per instance, shared by every request either way.
//
// Strings and byte slices cross as length-prefixed fields: a little-endian
// uint32 length, then the bytes. A request is the fields
//
//	method, target (path and query), remote address, body, then header name/value pairs
//
// and a response is a little-endian uint32 HTTP status followed by the fields
//
//	body, then header name/value pairs.
//
// A question (EventQuery, see AppendQueryEvent) and its answer (see
// AppendQueryAnswer) have layouts of their own.
//
// # A question answered at once
//
// A question the engine answers from memory (a cache hit, a local name)
// needs none of a poll's work: no goroutine, no ID to keep. The optional
// export dohfwd_ask takes the same EventQuery record and returns its
// QueryAnswer at once, or 0 having done nothing; the host then sends it
// with dohfwd_poll as before. Both hosts call it when no poll is under
// way and no event waits (the Workers glue for its plain questions, so
// a hit is answered before any await).
//
// The Workers glue sends both kinds: a plain RFC 8484 request, when the
// module's Status.Front allows it, as its question (the glue decodes the
// request and writes the response as the handler would, see Front), and
// every other request whole, so that what the glue does not reproduce
// stays the module's.
//
// # Hot cache entries answered by the host
//
// A hit costs the module's engine about ten times its native cost, and a
// host that asks for it (InitPublishHotEntries) answers the hits that are pure
// reads of the engine's state natively, from a mirror built from the
// engine package (engine.HotEntries, engine.PublishHotEntries). The module hands
// it the hot entries as hit records (engine's encoding) in a poll
// result, under the answer ID PublishedID, which no request has. A
// record published during dohfwd_ask waits for the next poll, and that
// ask's QueryAnswer carries QueryAnswerPublished, so the host polls at
// once. The module publishes nothing without the flag (the Workers glue
// never sets it), and a reload drops the records not yet handed over.
//
// Socket imports return 0 for success or an engine.ErrorClass value (1..7);
// so do the Code fields of socket events.
package abi

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/telemetry"
)

// ImportModule is the Wasm import module of the socket interface.
const ImportModule = "dohfwd"

// The socket imports. None of them waits (see the package comment).
const (
	// (transport, addr ptr, addr_len, src ptr, src_len u32, deadline_unix_ns i64, fd_out ptr) -> code.
	// Addresses are text: "ip:port", the source "ip" or empty. For TCP the
	// connect goes on after the call: sock_send and sock_recv may follow at
	// once (the host writes and reads once connected), and a failed connect
	// ends with an EventConnected. One that succeeds sends no event.
	ImportOpen = "sock_open"
	// (fd, buf ptr, len u32) -> code: writes the whole of buf.
	ImportSend = "sock_send"
	// (fd, max u32, deadline_unix_ns i64) -> code: the module waits for one
	// read of at most max bytes, answered by an EventRead.
	ImportRecv = "sock_recv"
	// (fd u32) -> code.
	ImportClose = "sock_close"
)

// The exports. The module keeps one buffer: the host asks for its address
// with dohfwd_buffer(n) (growing it to n bytes if needed; 0 just asks),
// writes its input there, calls the export with the input's length, and
// reads the output, whose length the export returns, from the address
// dohfwd_buffer(0) gives afterwards.
//
// The buffer moves only when it grows, and it grows only to fit: an input
// larger than it (dohfwd_buffer(n)) or an output larger than it. So a host
// may keep the address dohfwd_buffer(n) returned and n: an input of at
// most n bytes goes there without asking again, and an output of at most
// n bytes is read from there; only a longer output needs dohfwd_buffer(0)
// (after which the buffer is known to hold that many). The wazero host
// does so: a poll or an ask is then one call into the module, not three.
const (
	ExportBuffer = "dohfwd_buffer" // (n u32) -> ptr u32
	// (len, flags u32) -> errlen u32: the configuration in, as
	// config.Encode writes it (the host reads and checks the YAML, so its
	// errors name the line; the module links no YAML decoder); 0, or the
	// error text's length.
	ExportInit = "dohfwd_init"
	// (now_unix_ns i64, len u32) -> len u32: events in (AppendEvent), a
	// poll result out (ParsePollResult).
	ExportPoll   = "dohfwd_poll"
	ExportStatus = "dohfwd_status" // () -> len u32: a Status as JSON
	// (len u32) -> errlen u32: a reload (SIGHUP), the whole configuration
	// in as dohfwd_init takes it (config.Encode). The module applies it as
	// dohfwd serve applies a reload (assembly.Dohfwd.Reload): its engine
	// takes the engine's part or refuses it, and then nothing changes (the
	// error text's length is returned); else the log level and the limits
	// section (the engine's per-client share of upstream transactions, and
	// the client limits of the module's own DoH handler) change too, and 0
	// is returned. What needs a restart natively (listen, tls, ddr) is left
	// as it is. A host that replaces an instance starts the new one with
	// dohfwd_init from the configuration of the last reload. The Workers
	// glue does not reload: a new configuration is a new deployment.
	//
	// It replaced dohfwd_reconfigure (an engine.Config as JSON), which
	// missed the log level and the limits; the new name makes a host and
	// a module of different ABIs fail at instantiation instead of
	// misreading each other's JSON.
	ExportReload = "dohfwd_reload"
	// (len u32) -> len u32: optional, the synchronous way of a question
	// the module may answer from memory (a cache hit, a local name). In:
	// one EventQuery exactly as a poll takes it (AppendQueryEvent; its ID
	// is not read). Out: 0 when the module cannot answer it at once (it
	// has then started nothing and counted nothing: the host sends the
	// same question with dohfwd_poll), else the length of its encoded
	// QueryAnswer (ParseQueryAnswer), the bytes a poll result would have
	// carried for it; it counts in Status.Queries.AtOnce as such a poll's
	// would. No goroutine runs during the call, no event is read and no
	// poll result is kept back: a host calls it between polls, and polls
	// as before for every event that came meanwhile. A host looks it up
	// and, when a module lacks it, sends every question by dohfwd_poll.
	//
	// With QueryStart in the record's flags (read only here), a question
	// the module cannot answer at once is not left to a poll: the module
	// begins it in the same call, under the record's ID, exactly as a
	// poll's EventQuery would (its first query sent, or attached to an
	// identical question's flight, or on a worker), and returns
	// AskStarted, with a PollHeaderSize poll header in the buffer: the
	// deadline by which to poll (now when a goroutine waits to run). The
	// answer then comes out of a later poll under that ID, and
	// EventCancel ends it as a poll's question. A module that does not
	// know the flag returns 0 having started nothing, as ever: the host
	// then sends the question by dohfwd_poll (and need not set the flag
	// again); one that knows it returns AskUnreadable for an event with the
	// flag that it could not read. An answer at once is returned as
	// without the flag.
	ExportAsk = "dohfwd_ask"
)

// OptionalExports are the Exports a host uses when the module has them,
// and does without otherwise (a module built before them).
var OptionalExports = []string{ExportAsk}

// Exports are the module's exports: what a host looks up after
// instantiating it, each a function of the signature documented above
// (wasm i32 for u32, i64 for i64 and deadlines).
var Exports = []string{ExportBuffer, ExportInit, ExportPoll, ExportStatus, ExportReload, ExportAsk}

// Flags of dohfwd_init.
const (
	// InitTCPOnly starts the engine with TCP as the first transport of
	// every attempt, for hosts without UDP (Cloudflare Workers).
	InitTCPOnly = 1
	// InitPublishHotEntries makes the module publish its engine's hot cache
	// entries to the host (engine.PublishHotEntries): poll results then carry
	// them under PublishedID, and an ask that published some sets
	// QueryAnswerPublished.
	InitPublishHotEntries = 2
)

// PublishedID is the answer ID under which a poll result carries hit
// records (InitPublishHotEntries): the host numbers its requests from 1 and
// skips 0 when the numbering wraps. Its field holds the records, each a
// field (AppendHitRecord, HitRecords).
const PublishedID = 0

// AppendHitRecord appends one of the engine's hit records (a record
// engine.PublishHotEntries handed out) to b, the content of a PublishedID
// answer.
func AppendHitRecord(b, record []byte) []byte { return appendField(b, record) }

// HitRecords calls take with each hit record of a PublishedID answer's
// field, in order; the records alias field.
func HitRecords(field []byte, take func(record []byte)) error {
	for len(field) > 0 {
		rec, rest, err := nextField(field)
		if err != nil {
			return err
		}
		take(rec)
		field = rest
	}
	return nil
}

// ForwardedHeaders are the request headers a host passes to the module
// (with Host): the ones the DoH handling reads. Hosts keep the rest.
var ForwardedHeaders = []string{
	"Accept", "Content-Type", "Content-Length", "X-Forwarded-For", "Forwarded", "User-Agent", "Traceparent",
}

// Transport codes for sock_open.
const (
	TransportUDP = 0
	TransportTCP = 1
)

// Event kinds: what a host hands in with dohfwd_poll.
const (
	// EventRequest: a DoH request. ID is the host's number for it (the
	// answer comes back under it); Data is an encoded Request.
	EventRequest = 1
	// EventCancel: the client of request ID went away. Its question ends
	// as natively (cancelled, not charged to the server); its answer
	// still comes back, for the host to drop.
	EventCancel = 2
	// EventConnected: the TCP connect of socket ID failed; Code is the
	// failure. (A host may send it with Code 0 for a connect that
	// succeeded; the module ignores that.)
	EventConnected = 3
	// EventRead: the read the module asked for on socket ID ended: Code 0
	// and Data (at most max bytes) from From, or its failure (a timeout
	// included).
	EventRead = 4
	// EventQuery: a DNS question for the module's engine alone (the host
	// runs the DoH front end). ID is the host's number for it, from the
	// same numbering as EventRequest's, and EventCancel ends it the same
	// way; Code holds QueryFlags, From the client when QueryClient is set,
	// Data the trace (when QueryTrace is set) and the query: see
	// AppendQueryEvent. The answer is an encoded QueryAnswer.
	EventQuery = 5
)

// Flags of an EventQuery, in its Code.
const (
	// QueryClient: From's address is the client's (port 0), for the
	// engine's per-client share of upstream transactions
	// (engine.WithClient).
	QueryClient = 1
	// QueryTrace: Data starts with the request's trace (TraceSize
	// bytes), for the engine's events (engine.WithTrace).
	QueryTrace = 2
	// QueryStart: for dohfwd_ask alone (ExportAsk), begin the question
	// under the record's ID when it cannot be answered at once, and
	// return AskStarted. A poll ignores it (a poll begins every question).
	QueryStart = 4
)

// AskStarted is what dohfwd_ask returns for a question with QueryStart
// that it began instead of answering at once (no QueryAnswer is that
// long): the buffer then holds a poll header, the deadline by which the
// host must poll (ParseAskStarted).
const AskStarted = ^uint32(0)

// AskUnreadable is what dohfwd_ask returns for an event with QueryStart that
// it could not read (nor answer nor begin): not 0, which says the module
// does not know the flag. The host sends that question by dohfwd_poll, as
// for 0, and goes on setting the flag. A module that knows QueryStart but
// predates AskUnreadable returns 0 then. Only an event with the flag gets it,
// so a host that never sets the flag (the Workers glue) never sees it.
const AskUnreadable = AskStarted - 1

// AppendAskStarted appends the result of a dohfwd_ask that began its
// question: the deadline by which to poll (Unix ns), as a poll header.
func AppendAskStarted(b []byte, deadline int64) []byte { return AppendPollHeader(b, deadline) }

// ParseAskStarted reads the deadline of a dohfwd_ask that returned
// AskStarted.
func ParseAskStarted(b []byte) (deadline int64, err error) {
	if len(b) < PollHeaderSize {
		return 0, errShort
	}
	return int64(binary.LittleEndian.Uint64(b)), nil
}

// TraceSize is an engine.Trace as an EventQuery carries it: ID (16
// bytes), Parent (8), Span (8), Flags (1) and HasParent (1: 0 or 1).
const TraceSize = 34

// EventHeaderSize is the fixed part of an event: kind, id, code
// (uint32 each), the peer's port (uint16), two bytes of padding, the
// peer's address as 16 bytes (IPv4 mapped into IPv6), and the length of
// Data (uint32), which follows.
const EventHeaderSize = 36

// PollHeaderSize is the fixed part of a poll result: the next deadline
// (int64 Unix nanoseconds, 0 for none), then the finished answers, each a
// uint32 request ID and a field (an encoded Response).
const PollHeaderSize = 8

// Event is one input of dohfwd_poll.
type Event struct {
	Kind uint32
	ID   uint32 // request ID or socket fd
	Code uint32 // 0 or an engine.ErrorClass
	From netip.AddrPort
	Data []byte
}

// AppendEvent appends e's encoding to b.
func AppendEvent(b []byte, e *Event) []byte {
	b = appendEventHeader(b, e.Kind, e.ID, e.Code, e.From, len(e.Data))
	return append(b, e.Data...)
}

// appendEventHeader appends an event's fixed part, for n bytes of Data.
func appendEventHeader(b []byte, kind, id, code uint32, from netip.AddrPort, n int) []byte {
	b = binary.LittleEndian.AppendUint32(b, kind)
	b = binary.LittleEndian.AppendUint32(b, id)
	b = binary.LittleEndian.AppendUint32(b, code)
	b = binary.LittleEndian.AppendUint16(b, from.Port())
	b = append(b, 0, 0)
	var a16 [16]byte
	if from.Addr().IsValid() {
		a16 = from.Addr().As16()
	}
	b = append(b, a16[:]...)
	return binary.LittleEndian.AppendUint32(b, uint32(n))
}

// ParseEvent decodes the first event of b and returns the rest. Data
// aliases b.
func ParseEvent(b []byte) (e Event, rest []byte, err error) {
	if len(b) < EventHeaderSize {
		return e, nil, errShort
	}
	e.Kind = binary.LittleEndian.Uint32(b)
	e.ID = binary.LittleEndian.Uint32(b[4:])
	e.Code = binary.LittleEndian.Uint32(b[8:])
	port := binary.LittleEndian.Uint16(b[12:])
	e.From = netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[16:32])).Unmap(), port)
	e.Data, rest, err = nextField(b[32:])
	return e, rest, err
}

// Answer is a finished request in a poll result.
type Answer struct {
	ID       uint32
	Response []byte // an encoded Response
}

// AppendPollHeader starts a poll result with the next deadline.
func AppendPollHeader(b []byte, deadline int64) []byte {
	return binary.LittleEndian.AppendUint64(b, uint64(deadline))
}

// AppendAnswer appends a finished request to a poll result.
func AppendAnswer(b []byte, id uint32, response []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, id)
	return appendField(b, response)
}

// ParsePollResult decodes a poll result; the responses alias b.
func ParsePollResult(b []byte, answers []Answer) (deadline int64, _ []Answer, err error) {
	if len(b) < PollHeaderSize {
		return 0, answers, errShort
	}
	deadline = int64(binary.LittleEndian.Uint64(b))
	b = b[PollHeaderSize:]
	for len(b) > 0 {
		if len(b) < 4 {
			return deadline, answers, errShort
		}
		id := binary.LittleEndian.Uint32(b)
		var resp []byte
		if resp, b, err = nextField(b[4:]); err != nil {
			return deadline, answers, err
		}
		answers = append(answers, Answer{ID: id, Response: resp})
	}
	return deadline, answers, nil
}

// Query is one DNS question as an EventQuery hands it over: the checked
// query (QR clear, opcode QUERY, one question; the front end checked it)
// and what the native front end hands its engine with it through the
// context.
type Query struct {
	Wire []byte
	// Client is the client's address when the front end names it (its
	// per-client limits are on); the zero Addr otherwise.
	Client netip.Addr
	// Trace is the request's trace when HasTrace (trace context on).
	Trace    engine.Trace
	HasTrace bool
	// Start asks dohfwd_ask to begin the question when it cannot answer
	// it at once (QueryStart).
	Start bool
}

// AppendQueryEvent appends an EventQuery with id and q to b: the event
// header (Code QueryFlags, From the client), then Data: the trace's
// TraceSize bytes when there is one, then the query.
func AppendQueryEvent(b []byte, id uint32, q *Query) []byte {
	var flags uint32
	var from netip.AddrPort
	if q.Client.IsValid() {
		flags |= QueryClient
		from = netip.AddrPortFrom(q.Client, 0)
	}
	if q.Start {
		flags |= QueryStart
	}
	n := len(q.Wire)
	if q.HasTrace {
		flags |= QueryTrace
		n += TraceSize
	}
	b = appendEventHeader(b, EventQuery, id, flags, from, n)
	if q.HasTrace {
		t := &q.Trace
		b = append(b, t.ID[:]...)
		b = append(b, t.Parent[:]...)
		b = append(b, t.Span[:]...)
		b = append(b, t.Flags, boolByte(t.HasParent))
	}
	return append(b, q.Wire...)
}

// ParseQuery reads the question of an EventQuery e. Wire aliases e.Data.
func ParseQuery(e *Event) (Query, error) {
	var q Query
	if e.Code&QueryClient != 0 {
		q.Client = e.From.Addr()
	}
	q.Start = e.Code&QueryStart != 0
	d := e.Data
	if e.Code&QueryTrace != 0 {
		if len(d) < TraceSize {
			return q, errShort
		}
		t := &q.Trace
		copy(t.ID[:], d[0:16])
		copy(t.Parent[:], d[16:24])
		copy(t.Span[:], d[24:32])
		t.Flags, t.HasParent = d[32], d[33] != 0
		q.HasTrace = true
		d = d[TraceSize:]
	}
	q.Wire = d
	return q, nil
}

// QueryAnswerHeaderSize is the fixed part of a QueryAnswer: Rcode
// (int32), TTL (uint32), Attempts (uint32), Result, Reason and the flags
// (QueryAnswerCacheable, QueryAnswerCacheHit, QueryAnswerShared; a byte
// each) and a byte of padding, Question (uint64), Upstream (int64
// nanoseconds). The fields QName, Scope and Wire follow.
const QueryAnswerHeaderSize = 32

// Flags of a QueryAnswer.
const (
	QueryAnswerCacheable = 1
	QueryAnswerCacheHit  = 2
	QueryAnswerShared    = 4
	// QueryAnswerPublished, on dohfwd_ask's answer only: hit records
	// wait for the next poll (InitPublishHotEntries).
	QueryAnswerPublished = 8
)

// queryAnswerFlagsAt is the offset of a QueryAnswer's flags byte.
const queryAnswerFlagsAt = 14

// MarkPublished sets QueryAnswerPublished on the encoded QueryAnswer b.
func MarkPublished(b []byte) {
	if len(b) >= QueryAnswerHeaderSize {
		b[queryAnswerFlagsAt] |= QueryAnswerPublished
	}
}

// Published reports whether the encoded QueryAnswer b carries
// QueryAnswerPublished.
func Published(b []byte) bool {
	return len(b) >= QueryAnswerHeaderSize && b[queryAnswerFlagsAt]&QueryAnswerPublished != 0
}

// AppendQueryAnswer appends the engine's answer r to an EventQuery, as
// the front end reads it, to b. Answered is not sent: the host takes its
// own clock when the answer comes out.
func AppendQueryAnswer(b []byte, r *engine.Response) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(int32(r.Rcode)))
	b = binary.LittleEndian.AppendUint32(b, r.TTL)
	b = binary.LittleEndian.AppendUint32(b, uint32(r.Attempts))
	var flags byte
	if r.Cacheable {
		flags |= QueryAnswerCacheable
	}
	if r.CacheHit {
		flags |= QueryAnswerCacheHit
	}
	if r.Shared {
		flags |= QueryAnswerShared
	}
	b = append(b, byte(r.Result), byte(r.Reason), flags, 0)
	b = binary.LittleEndian.AppendUint64(b, r.Question)
	b = binary.LittleEndian.AppendUint64(b, uint64(r.Upstream))
	b = appendField(b, r.QName)
	b = appendField(b, r.Scope)
	return appendField(b, r.Wire)
}

// ParseQueryAnswer decodes a QueryAnswer. Wire aliases b; QName and
// Scope are copies.
func ParseQueryAnswer(b []byte) (engine.Response, error) {
	var r engine.Response
	if len(b) < QueryAnswerHeaderSize {
		return r, errShort
	}
	r.Rcode = int(int32(binary.LittleEndian.Uint32(b)))
	r.TTL = binary.LittleEndian.Uint32(b[4:])
	r.Attempts = int(binary.LittleEndian.Uint32(b[8:]))
	r.Result, r.Reason = engine.Result(b[12]), engine.Reason(b[13])
	flags := b[queryAnswerFlagsAt]
	r.Cacheable, r.CacheHit, r.Shared = flags&QueryAnswerCacheable != 0, flags&QueryAnswerCacheHit != 0, flags&QueryAnswerShared != 0
	r.Question = binary.LittleEndian.Uint64(b[16:])
	r.Upstream = time.Duration(binary.LittleEndian.Uint64(b[24:]))
	var f [3][]byte
	b = b[QueryAnswerHeaderSize:]
	for i := range f {
		var err error
		if f[i], b, err = nextField(b); err != nil {
			return r, err
		}
	}
	if len(b) != 0 {
		return r, errLong
	}
	r.QName, r.Scope, r.Wire = string(f[0]), string(f[1]), f[2]
	return r, nil
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

// Status is what dohfwd_status returns, as JSON: the instance's engine
// status (its fields at the top level, as engine.Status marshals) and the
// attempt latencies of its servers, which its host exports with its own
// metrics (the module has no Prometheus).
type Status struct {
	engine.Status
	AttemptLatency map[string]telemetry.Histogram `json:"attempt_latency,omitempty"`
	// Queries counts the EventQuery questions by how the module answered
	// them.
	Queries QueryCounts `json:"queries"`
	// Parked counts the times a goroutine of the module parked in the
	// module's own waits (a worker for its next question or request, a
	// socket for its host's event): two a question that Waited, none
	// one that Finished. Waits inside the engine (a follower's on its
	// flight) are not counted.
	Parked uint64 `json:"parked"`
	// Front is what a host without a DoH front end of its own needs to
	// answer plain RFC 8484 requests with EventQuery; zero before
	// dohfwd_init.
	Front Front `json:"front"`
}

// Front tells a host that hands the module whole requests (the Workers
// glue) when it may answer a plain RFC 8484 request itself: send its
// query as an EventQuery and write the response as the module's DoH
// handler would for the engine's answer. It is read once, from
// dohfwd_status after dohfwd_init, so the host parses no configuration.
//
// A plain request is a GET at Path whose only query parameter is dns (an
// unpadded base64url query), or a POST at Path with Content-Type
// application/dns-message and a body (and Content-Length) of at most
// 65 535 bytes; its query passes the handler's plain test (one question
// of ordinary labels, QUERY, no records but an OPT with only Cookie or
// Padding options). Its response is 200 with the reply (or, for an empty
// reply, a SERVFAIL made from the query: engine.AppendErrorReply, padded
// when the query was) and the headers, in this order, Content-Type
// application/dns-message, Content-Length, Cache-Control (max-age=TTL
// when the answer is QueryAnswerCacheable, else no-store), Vary: Accept,
// then, when ServerTiming, Server-Timing as doh.ServerTiming writes it
// from the answer's Result, flags, Attempts and Upstream, and, when
// TraceContext, traceresponse: the question then carries its trace
// (QueryTrace), from the request's one traceparent or made afresh, as
// doh.NewTrace does. Everything else still goes to the module as an
// EventRequest.
type Front struct {
	// Path is the DoH path the handler serves (listen.path).
	Path string `json:"path"`
	// Questions is true when the handler would answer a plain request
	// so: no per-client limits (they need the client, which trusted
	// proxies' headers may name) and no trusted proxies. When false
	// every request goes to the module.
	Questions bool `json:"questions"`
	// ServerTiming and TraceContext are listen.server_timing and
	// listen.trace_context.
	ServerTiming bool `json:"server_timing"`
	TraceContext bool `json:"trace_context"`
}

// QueryCounts counts EventQuery questions.
type QueryCounts struct {
	// AtOnce were answered from memory (cache, local names) in the poll
	// that delivered them, on the poll's own goroutine.
	AtOnce uint64 `json:"at_once"`
	// Waited went to a worker goroutine: they waited on the network or
	// on an identical question.
	Waited uint64 `json:"waited"`
	// Joined waited for an identical question already upstream without
	// a goroutine of their own: the engine answered them when that
	// question's answer came (engine.JoinFlight).
	Joined uint64 `json:"joined"`
	// Finished went upstream without a goroutine of their own: their
	// first query was sent in the poll that delivered them, and the poll
	// that delivered its reply answered them (engine.StartMiss,
	// engine.FinishWithReply). Any other end of that wait sends them to a
	// worker goroutine, counted Waited.
	Finished uint64 `json:"finished"`
}

// Request is a DoH request as the host hands it over.
type Request struct {
	Method  string
	Target  string // path and query, as in the request line
	Remote  string // the client's address, "ip:port"
	Body    []byte
	Headers [][2]string
}

// Response is the module's answer.
type Response struct {
	Status  int
	Body    []byte
	Headers [][2]string
}

// AppendRequest appends r's encoding to b.
func AppendRequest(b []byte, r *Request) []byte {
	b = appendField(b, r.Method)
	b = appendField(b, r.Target)
	b = appendField(b, r.Remote)
	b = appendField(b, r.Body)
	return appendHeaders(b, r.Headers)
}

// AppendResponse appends r's encoding to b.
func AppendResponse(b []byte, r *Response) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(r.Status))
	b = appendField(b, r.Body)
	return appendHeaders(b, r.Headers)
}

func appendHeaders(b []byte, hs [][2]string) []byte {
	for _, h := range hs {
		b = appendField(b, h[0])
		b = appendField(b, h[1])
	}
	return b
}

var (
	errShort = errors.New("abi: message cut short")
	errLong  = errors.New("abi: bytes after the message")
)

// ParseRequest decodes a request. Body aliases b.
func ParseRequest(b []byte) (Request, error) {
	var r Request
	var f [4][]byte
	for i := range f {
		var err error
		if f[i], b, err = nextField(b); err != nil {
			return r, err
		}
	}
	r.Method, r.Target, r.Remote, r.Body = string(f[0]), string(f[1]), string(f[2]), f[3]
	var err error
	r.Headers, err = parseHeaders(b)
	return r, err
}

// ParseResponse decodes a response. Body aliases b.
func ParseResponse(b []byte) (Response, error) {
	var r Response
	if len(b) < 4 {
		return r, errShort
	}
	r.Status = int(binary.LittleEndian.Uint32(b))
	var err error
	if r.Body, b, err = nextField(b[4:]); err != nil {
		return r, err
	}
	r.Headers, err = parseHeaders(b)
	return r, err
}

func parseHeaders(b []byte) ([][2]string, error) {
	var hs [][2]string
	for len(b) > 0 {
		k, rest, err := nextField(b)
		if err != nil {
			return nil, err
		}
		v, rest, err := nextField(rest)
		if err != nil {
			return nil, err
		}
		hs = append(hs, [2]string{string(k), string(v)})
		b = rest
	}
	return hs, nil
}

func appendField[T string | []byte](b []byte, s T) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

func nextField(b []byte) (field, rest []byte, err error) {
	if len(b) < 4 {
		return nil, nil, errShort
	}
	n := binary.LittleEndian.Uint32(b)
	if uint64(n) > uint64(len(b)-4) {
		return nil, nil, errShort
	}
	return b[4 : 4+n], b[4+n:], nil
}
