package doh

import (
	"context"
	"encoding/binary"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/miekg/dns"
)

// Resolver answers one checked query: QR clear, opcode QUERY, exactly one
// question. ctx is the client's budget: it ends when the client goes away.
// The returned Msg must not be in use by another goroutine (the handler
// packs it, which touches its OPT record). *engine.Engine satisfies it.
type Resolver interface {
	Resolve(ctx context.Context, q *dns.Msg) engine.Response
}

// WireResolver is a Resolver that also answers a query given as bytes,
// appending the client's reply to dst as Response.Wire: the client's ID,
// padded when the query was, with its rcode and TTL for Cache-Control.
// *engine.Engine satisfies it; the RFC 8484 path then neither unpacks nor
// packs an answer.
type WireResolver interface {
	Resolver
	ResolveWire(ctx context.Context, query, dst []byte) engine.Response
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
	// written, for metrics and logs. It must not block or keep
	// x.Response.Msg (x.Response.Wire is cleared once written).
	Observe func(x Exchange)
	// Setup, if set, serves the device setup pages: GET / from a browser
	// (Accept: text/html) and SetupProfilePath (see package setup).
	Setup http.Handler
	// ServerTiming adds a Server-Timing header to each resolved answer:
	// its source, attempts and upstream time (see [ServerTiming]).
	ServerTiming bool
	// TraceContext reads W3C traceparent (or makes a trace) for each
	// request, hands it to the resolver with the question, and answers
	// with traceresponse (see [RequestTrace]).
	TraceContext bool
	// Admit, if set, is asked for each question about to be resolved,
	// with the client's address; when it refuses, the client gets 429
	// with Retry-After and the resolver is not asked. With Admit set the
	// resolver's context also names the client (engine.WithClient), for
	// its per-client share of transactions.
	Admit func(client netip.Addr) (ok bool, retryAfter time.Duration)
}

// Format is the form of a request.
type Format uint8

const (
	FormatWire Format = iota // RFC 8484 application/dns-message
	FormatJSON               // application/dns-json
)

func (f Format) String() string {
	if f == FormatJSON {
		return "json"
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
	Start    time.Time
	Duration time.Duration
	// Trace is the request's trace, with Options.TraceContext.
	Trace engine.Trace

	wireBuf *[]byte // the pooled buffer Response.Wire was written into
}

// NewHandler returns the DoH handler: RFC 8484 at o.Path, JSON at JSONPath
// (and at o.Path for a GET with Accept: application/dns-json and no dns
// parameter), 404 elsewhere. Methods other than GET and POST (HEAD
// included: a DoH answer without its body is of no use) get 405.
func NewHandler(r Resolver, o Options) http.Handler {
	h := &handler{resolver: r, path: o.Path, trusted: o.TrustedProxies, observe: o.Observe, setup: o.Setup,
		admit: o.Admit, serverTiming: o.ServerTiming, traceContext: o.TraceContext}
	if h.path == "" {
		h.path = DefaultPath
	}
	if h.path[0] != '/' {
		h.path = "/" + h.path
	}
	h.notFound = "not found: DNS queries go to " + h.path + " (RFC 8484) or " + JSONPath + " (JSON)"
	return h
}

type handler struct {
	resolver Resolver
	path     string
	trusted  []netip.Prefix
	observe  func(Exchange)
	setup    http.Handler
	admit    func(netip.Addr) (bool, time.Duration)
	notFound string

	serverTiming bool
	traceContext bool
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	x := Exchange{Method: r.Method, Proto: r.Proto, Rcode: -1}
	if h.observe != nil {
		x.Start = time.Now()
	}
	if h.observe != nil || h.admit != nil {
		x.Peer, x.ClientIP = h.client(r)
	}
	if h.traceContext {
		x.Trace = RequestTrace(r.Header)
	}
	switch r.URL.Path {
	case h.path:
		if r.Method == http.MethodGet && acceptsJSON(r.Header) && !hasQueryParam(r.URL.RawQuery, "dns") {
			h.serveJSON(w, r, &x, true)
		} else {
			h.serveWire(w, r, &x)
		}
	case JSONPath:
		h.serveJSON(w, r, &x, false)
	case "/", SetupProfilePath:
		if h.setup != nil && (r.URL.Path != "/" || acceptsHTML(r.Header)) {
			h.setup.ServeHTTP(w, r) // a page, not a DNS exchange: not observed
			return
		}
		h.fail(w, &x, http.StatusNotFound, h.notFound)
	default:
		h.fail(w, &x, http.StatusNotFound, h.notFound)
	}
	if h.observe != nil {
		x.Duration = time.Since(x.Start)
		h.observe(x)
	}
}

// client returns the TCP peer and the client's address.
func (h *handler) client(r *http.Request) (peer netip.AddrPort, ip netip.Addr) {
	peer, _ = netip.ParseAddrPort(r.RemoteAddr)
	peer = netip.AddrPortFrom(peer.Addr().Unmap(), peer.Port())
	return peer, ClientIP(peer.Addr(), h.trusted, r.Header["Forwarded"], r.Header["X-Forwarded-For"])
}

// Buffers for reading queries and packing answers. Most DNS messages are
// far below 4 KiB; a buffer grown past 16 KiB for a big one is left to the
// garbage collector, so the pool stays small.
const pooledBufferSize = 4096

var buffers = sync.Pool{New: func() any { b := make([]byte, 0, pooledBufferSize); return &b }}

func getBuffer() *[]byte { return buffers.Get().(*[]byte) }

func putBuffer(bp *[]byte, b []byte) {
	if cap(b) <= pooledBufferSize*4 {
		*bp = b[:0]
		buffers.Put(bp)
	}
}

// serveWire answers an RFC 8484 request.
func (h *handler) serveWire(w http.ResponseWriter, r *http.Request, x *Exchange) {
	x.Format = FormatWire
	in := getBuffer()
	raw := (*in)[:0]
	defer func() { putBuffer(in, raw) }()

	var err error
	switch r.Method {
	case http.MethodGet:
		v, ok := queryParam(r.URL.RawQuery, "dns")
		if !ok || v == "" {
			h.fail(w, x, http.StatusBadRequest, "missing dns parameter: want ?dns=<base64url DNS query>")
			return
		}
		if raw, err = decodeDNSParam(v, raw); err != nil {
			h.fail(w, x, http.StatusBadRequest, "bad dns parameter: "+err.Error())
			return
		}
	case http.MethodPost:
		if !isMediaType(r.Header.Get("Content-Type"), MediaTypeDNS) {
			h.fail(w, x, http.StatusUnsupportedMediaType, "unsupported Content-Type: want "+MediaTypeDNS)
			return
		}
		if r.ContentLength > MaxMessageSize {
			h.fail(w, x, http.StatusRequestEntityTooLarge, errTooLarge.Error())
			return
		}
		if raw, err = readMessage(r.Body, raw); err != nil {
			if err == errTooLarge {
				h.fail(w, x, http.StatusRequestEntityTooLarge, err.Error())
			} else {
				h.fail(w, x, http.StatusBadRequest, "reading body: "+err.Error())
			}
			return
		}
	default:
		w.Header()["Allow"] = allowGetPost
		h.fail(w, x, http.StatusMethodNotAllowed, "method not allowed: use GET or POST")
		return
	}

	q, reply, status, problem := checkQuery(raw)
	if status != http.StatusOK {
		h.fail(w, x, status, problem)
		return
	}
	if q != nil && len(q.Question) == 1 {
		x.QName, x.QType = q.Question[0].Name, q.Question[0].Qtype
	}
	if reply == nil {
		if !h.resolve(r.Context(), w, q, raw, x) {
			return
		}
		reply = x.Response.Msg
	} else {
		x.Problem = problem
	}
	h.writeWire(w, r, x, q, reply)
}

// resolve asks the resolver: with the query's bytes raw when it answers
// bytes (the RFC 8484 path), else with q (the JSON form passes raw nil).
// It reports false when there is nothing more to write: the client was
// refused by Admit (answered 429 here), or went away meanwhile.
func (h *handler) resolve(ctx context.Context, w http.ResponseWriter, q *dns.Msg, raw []byte, x *Exchange) bool {
	if h.admit != nil {
		if ok, wait := h.admit(x.ClientIP); !ok {
			h.refuse(w, x, wait)
			return false
		}
		ctx = engine.WithClient(ctx, x.ClientIP)
	}
	x.Resolved = true
	if h.traceContext {
		ctx = engine.WithTrace(ctx, x.Trace)
	}
	if wr, ok := h.resolver.(WireResolver); ok && raw != nil {
		bp := getBuffer()
		x.Response = wr.ResolveWire(ctx, raw, (*bp)[:0])
		x.wireBuf = bp
		if ctx.Err() != nil {
			h.releaseWire(x)
			x.Status = StatusClientClosed
			return false
		}
		if len(x.Response.Wire) >= headerSize {
			return true
		}
		h.releaseWire(x)
		x.Response = h.resolver.Resolve(ctx, q) // the engine could not read raw
	} else {
		x.Response = h.resolver.Resolve(ctx, q)
	}
	if ctx.Err() != nil {
		x.Status = StatusClientClosed
		return false
	}
	if x.Response.Msg == nil { // a Resolver that breaks its contract
		x.Response.Msg = new(dns.Msg).SetRcode(q, dns.RcodeServerFailure)
	}
	return true
}

// refuse answers a client over its limits: 429 with Retry-After in whole
// seconds, at least 1.
func (h *handler) refuse(w http.ResponseWriter, x *Exchange, wait time.Duration) {
	secs := max(1, int((wait+time.Second-1)/time.Second))
	w.Header()["Retry-After"] = []string{strconv.Itoa(secs)}
	const problem = "too many requests: this client is over its limits"
	if x.Format == FormatJSON {
		h.failJSON(w, x, http.StatusTooManyRequests, problem)
	} else {
		h.fail(w, x, http.StatusTooManyRequests, problem)
	}
}

// releaseWire returns the buffer of x.Response.Wire to the pool.
func (h *handler) releaseWire(x *Exchange) {
	if x.wireBuf != nil {
		putBuffer(x.wireBuf, x.Response.Wire)
		x.wireBuf, x.Response.Wire = nil, nil
	}
}

// writeWire writes the reply: the resolver's bytes as they are (they carry
// the client's ID and padding already), or reply packed for the client:
// the client's ID, compressed, padded when the query was.
func (h *handler) writeWire(w http.ResponseWriter, r *http.Request, x *Exchange, q, reply *dns.Msg) {
	if reply == nil && x.Response.Wire != nil {
		defer h.releaseWire(x)
		h.writeDNS(w, r, x, x.Response.Wire, x.Response.Rcode, cacheControlValue(x.Response.TTL, x.Response.Cacheable))
		return
	}
	out := getBuffer()
	wire, err := packReply(reply, q, (*out)[:0])
	defer func() { putBuffer(out, wire) }()
	if err != nil {
		h.fail(w, x, http.StatusInternalServerError, "cannot pack the answer: "+err.Error())
		return
	}
	h.writeDNS(w, r, x, wire, reply.Rcode, cacheControlHeader(reply))
}

// writeDNS writes a DNS message with its headers.
func (h *handler) writeDNS(w http.ResponseWriter, r *http.Request, x *Exchange, wire []byte, rcode int, cacheControl []string) {
	hdr := w.Header()
	hdr["Content-Type"] = contentTypeDNS
	hdr["Content-Length"] = []string{strconv.Itoa(len(wire))}
	hdr["Cache-Control"] = cacheControl
	if r.URL.Path == h.path {
		hdr["Vary"] = varyAccept
	}
	if x.Resolved {
		h.setResolvedHeaders(hdr, x)
	}
	x.Status, x.Rcode = http.StatusOK, rcode
	w.WriteHeader(http.StatusOK)
	w.Write(wire)
}

// setResolvedHeaders adds what an answer from the resolver carries beside
// the DNS message: Server-Timing and traceresponse, when on.
func (h *handler) setResolvedHeaders(hdr http.Header, x *Exchange) {
	var tr *engine.Trace
	if h.traceContext {
		tr = &x.Trace
	}
	setOperatorHeaders(hdr, x.Response, h.serverTiming, tr)
}

// packReply packs reply without changing it: compressed, and padded to a
// multiple of PaddingBlock when q carries a Padding option.
func packReply(reply, q *dns.Msg, buf []byte) ([]byte, error) {
	m := *reply // a shallow copy: the resolver's message stays as it was
	m.Compress = true
	if q != nil {
		m.Id = q.Id
		if wantsPadding(q) {
			return packPadded(&m, buf)
		}
	}
	return m.PackBuffer(buf)
}

// fail answers with an HTTP error and a short text saying what is wrong.
func (h *handler) fail(w http.ResponseWriter, x *Exchange, status int, problem string) {
	x.Status, x.Problem = status, problem
	hdr := w.Header()
	hdr["Content-Type"] = contentTypeText
	hdr["Cache-Control"] = noStore
	hdr["X-Content-Type-Options"] = nosniff
	hdr["Content-Length"] = []string{strconv.Itoa(len(problem) + 1)}
	w.WriteHeader(status)
	b := make([]byte, 0, len(problem)+1)
	w.Write(append(append(b, problem...), '\n'))
}

// Header values shared by every response; net/http only reads them.
var (
	contentTypeDNS  = []string{MediaTypeDNS}
	contentTypeJSON = []string{MediaTypeJSON}
	contentTypeText = []string{"text/plain; charset=utf-8"}
	contentTypeErr  = []string{"application/json"}
	allowGetPost    = []string{"GET, POST"}
	allowGet        = []string{"GET"}
	varyAccept      = []string{"Accept"}
	noStore         = []string{"no-store"}
	nosniff         = []string{"nosniff"}
)

// messageID reads a wire message's ID.
func messageID(b []byte) uint16 { return binary.BigEndian.Uint16(b) }
