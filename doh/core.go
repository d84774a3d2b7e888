package doh

import (
	"context"
	"encoding/json"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dohfwd/dohfwd/doh/odoh"
	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/dnswire"
	"github.com/dohfwd/dohfwd/engine/wiretap"
)

// This file is the DoH semantics, once, for every transport: a [Request]
// in, a [Response] out. The net/http path (HTTP/1.1) and the
// HTTP/2 server of this package both go through call.begin, answer and
// finish; only answer meets the resolver.

// HeaderField is one HTTP header field. Names are lower case, as HTTP/2
// carries them.
type HeaderField struct {
	Name, Value string
}

// Header is an ordered list of header fields: the request headers other
// than HTTP/2's pseudo-headers, or the headers of a response. A list, not
// a map: a DoH request carries a handful, and a transport reuses it.
type Header []HeaderField

// Get returns the first value of name (lower case), or "".
func (h Header) Get(name string) string {
	for i := range h {
		if h[i].Name == name {
			return h[i].Value
		}
	}
	return ""
}

// Values returns every value of name (lower case), in order.
func (h Header) Values(name string) []string {
	var v []string
	for i := range h {
		if h[i].Name == name {
			v = append(v, h[i].Value)
		}
	}
	return v
}

// Add appends a field.
func (h *Header) Add(name, value string) { *h = append(*h, HeaderField{name, value}) }

// Request is one DoH request as a transport read it.
type Request struct {
	Method   string
	Path     string // without the query
	RawQuery string
	Proto    string // "HTTP/2.0", "HTTP/1.1"
	Host     string // Host, or HTTP/2's :authority
	Header   Header
	// ContentLength is the Content-Length the client sent, -1 if none.
	ContentLength int64
	// Body is the request body, read up to MaxMessageSize+1 bytes;
	// BodyErr what went wrong reading it.
	Body    []byte
	BodyErr error
	Peer    netip.AddrPort
	// Local is the server's side of the connection, when known (for the
	// wiretap).
	Local netip.AddrPort
}

// Response is what the client gets: a status, the header fields in the
// order written, a body. Other parts of the server may append fields.
type Response struct {
	Status int
	Header Header
	Body   []byte
}

// call is one request on its way through the handler. Transports keep one
// per request and reuse it: its buffers and lists survive reset.
type call struct {
	req  Request
	resp Response
	x    Exchange

	raw       []byte // the checked query (in, or the body), once begin passes it
	onDoHPath bool   // the response varies with Accept
	page      bool   // a setup page, not a DNS exchange: not observed
	admitted  bool   // Options.Admit let the question through
	// nameLater: the query is plain and x.QName not made yet: finish
	// takes the resolver's (Response.QName) or makes it from raw, and
	// only for an observer.
	nameLater bool
	// tapped: the wiretap was handed the question (tapClient).
	tapped bool

	in  []byte // the decoded GET query, or the JSON form's query
	out []byte // the response body

	// received is when the transport had the request, if it keeps a
	// clock (the HTTP/2 server reads one per read batch); zero: begin
	// reads the clock.
	received time.Time

	// miss is what the resolver read of the query when it could not
	// answer at once (ImmediateResolver): the later answer starts there.
	miss engine.Miss
	// qctx is the question's context when it names the client or
	// carries the trace: filled in place, not allocated per question.
	qctx engine.QuestionContext

	// oblivious: an ODoH query, opened into opened; its answer is sealed.
	oblivious bool
	opened    odoh.Opened
	// relayHost and relayPath are the target of a request to the relay.
	relayHost, relayPath string
}

var calls = sync.Pool{New: func() any {
	return &call{in: make([]byte, 0, pooledBufferSize), out: make([]byte, 0, pooledBufferSize)}
}}

func getCall() *call { return calls.Get().(*call) }

func putCall(c *call) {
	c.reset()
	if cap(c.in) <= pooledBufferSize*4 && cap(c.out) <= pooledBufferSize*4 {
		calls.Put(c)
	}
}

// reset forgets a request, keeping the buffers.
func (c *call) reset() {
	hdr, body := c.req.Header[:0], c.req.Body[:0]
	rh := c.resp.Header[:0]
	clear(c.req.Header[:cap(c.req.Header)])
	c.req = Request{Header: hdr, Body: body}
	c.resp = Response{Header: rh}
	c.x = Exchange{}
	c.raw = nil
	c.onDoHPath, c.page, c.admitted, c.nameLater, c.tapped = false, false, false, false, false
	c.received = time.Time{}
	c.miss = engine.Miss{}
	c.qctx = engine.QuestionContext{}
	c.oblivious, c.opened, c.relayHost, c.relayPath = false, odoh.Opened{}, "", ""
	c.in, c.out = c.in[:0], c.out[:0]
}

// Buffers grown past this size for a big message are left to the garbage
// collector, so pooled state stays small.
const pooledBufferSize = 4096

// ImmediateResolver is a [Resolver] that can answer some queries at
// once, from memory (its cache, local names), without waiting on the
// network. The HTTP/2 server asks it first on the connection's own
// goroutine; only what it cannot answer at once goes to a goroutine of
// its own. ok false leaves nothing behind but miss: when miss is then
// Ready the query is asked with ResolveMiss (which does not read it
// again), else with Resolve. trace, when not nil, is the request's
// trace (see Options.TraceContext). *engine.Engine and *ddr.Resolver
// satisfy it.
type ImmediateResolver interface {
	AnswerNow(query, dst []byte, trace *engine.Trace, miss *engine.Miss) (r engine.Response, ok bool)
	ResolveMiss(ctx context.Context, miss *engine.Miss, dst []byte) engine.Response
}

// MissStarter is an [ImmediateResolver] that can begin a miss on the
// goroutine that read it, before the miss is handed to a goroutine of its
// own: the HTTP/2 server calls StartMiss for each miss of a read batch,
// one after the other, then ResolveMiss for each on a worker. Once
// StartMiss began the miss (miss.Started), ResolveMiss must be called
// for it even after its client went away. *engine.Engine and
// *ddr.Resolver satisfy it. When StartMiss reports true, the resolver
// calls then once the first transaction ended, instead (see
// engine.MissContinuation).
type MissStarter interface {
	StartMiss(ctx context.Context, miss *engine.Miss, then engine.MissContinuation) bool
}

// Handler is the DoH handler: RFC 8484 at its path, JSON at JSONPath (and
// at its path for a GET with Accept: application/dns-json and no dns
// parameter), the setup pages at / (for a browser) and SetupProfilePath
// when Options.Setup is set, 404 elsewhere. Methods other than GET and
// POST (HEAD included: a DoH answer without its body is of no use) get
// 405. It is an [net/http.Handler] for HTTP/1.1; the HTTP/2 server of
// this package calls its core directly.
type Handler struct {
	resolver  Resolver
	immediate ImmediateResolver // resolver, when it can also answer at once
	starter   MissStarter       // resolver, when it can also begin a miss
	path      string
	trusted   []netip.Prefix
	observe   func(Exchange)
	setup     SetupPages
	admit     func(netip.Addr) (bool, time.Duration)
	notFound  string

	serverTiming bool
	traceContext bool
	tap          wiretap.Tap     // nil: off
	oblivious    ObliviousTarget // nil: not an ODoH target
	relay        ObliviousRelay  // nil: no ODoH relay

	// altSvc, when set, says what Alt-Svc every response carries
	// (SetAltSvc).
	altSvc atomic.Pointer[altSvc]

	// serve, when set, answers every request instead of the core (see
	// HandlerFor); the fields above are then unused.
	serve RequestServer
}

// NewHandler returns the DoH handler over r with o's path, trusted
// proxies, observer, setup pages and operator headers.
func NewHandler(r Resolver, o Options) *Handler {
	h := &Handler{resolver: r, path: o.Path, trusted: o.TrustedProxies, observe: o.Observe, setup: o.Setup,
		admit: o.Admit, serverTiming: o.ServerTiming, traceContext: o.TraceContext, tap: o.Wiretap,
		oblivious: o.Oblivious, relay: o.Relay}
	h.immediate, _ = r.(ImmediateResolver)
	if h.immediate != nil {
		h.starter, _ = r.(MissStarter)
	}
	if h.path == "" {
		h.path = DefaultPath
	}
	if h.path[0] != '/' {
		h.path = "/" + h.path
	}
	h.notFound = "not found: DNS queries go to " + h.path + " (RFC 8484) or " + JSONPath + " (JSON)"
	return h
}

// SetAltSvc makes every response advertise HTTP/3 (Alt-Svc, RFC 7838;
// RFC 9114 §3.1.1) from now on, so HTTP/2 and HTTP/1.1 clients learn
// where to move; udpPort 0 stops it. The HTTP/3 listener sets it once
// its port is bound. With sameAsTCP (the QUIC side is bound on the HTTPS
// listener's own port) the port advertised is the one the client named
// in its Host or :authority (443 when none): behind a balancer or a
// Service that maps 443 to the listener's port for TCP and UDP alike,
// that is the port that reaches the QUIC side. Otherwise it is udpPort.
func (h *Handler) SetAltSvc(udpPort int, sameAsTCP bool) {
	if udpPort == 0 {
		h.altSvc.Store(nil)
		return
	}
	h.altSvc.Store(&altSvc{port: strconv.Itoa(udpPort), bound: AltSvcValue(udpPort),
		https: AltSvcValue(443), followHost: sameAsTCP})
}

// altSvc is the Alt-Svc a handler advertises.
type altSvc struct {
	port, bound string // the UDP port, and its value
	https       string // the value for port 443
	followHost  bool
}

// value is the Alt-Svc for a request that named host.
func (a *altSvc) value(host string) string {
	if !a.followHost {
		return a.bound
	}
	port := "443"
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.HasSuffix(host, "]") {
		port = host[i+1:]
	}
	switch port {
	case a.port:
		return a.bound
	case "443":
		return a.https
	}
	if n, err := strconv.Atoi(port); err == nil && n > 0 && n < 65536 {
		return AltSvcValue(n)
	}
	return a.bound
}

// AltSvcValue is the Alt-Svc value that advertises HTTP/3 on port of the
// same host for a day.
func AltSvcValue(port int) string { return `h3=":` + strconv.Itoa(port) + `"; ma=86400` }

// Path is the path h serves RFC 8484 at (Options.Path, DefaultPath if
// none).
func (h *Handler) Path() string { return h.path }

// SetupProfilePath is the Apple profile's path, served by Options.Setup.
const SetupProfilePath = "/apple.mobileconfig"

// acceptsHTML reports whether the client is a browser asking for a page:
// only then does GET / show the setup page.
func acceptsHTML(h Header) bool {
	for i := range h {
		if h[i].Name == "accept" && strings.Contains(strings.ToLower(h[i].Value), "text/html") {
			return true
		}
	}
	return false
}

// begin reads and checks c.req. It reports true when the response is
// ready (an HTTP error, or a DNS error answered here); otherwise c.raw
// waits for answer.
func (h *Handler) begin(c *call) (done bool) {
	if h.serve != nil {
		return false // all of it is h.serve's, in answer
	}
	r := &c.req
	c.x.Method, c.x.Proto, c.x.Rcode = r.Method, r.Proto, -1
	if a := h.altSvc.Load(); a != nil {
		c.resp.Header = append(c.resp.Header, HeaderField{"alt-svc", a.value(r.Host)})
	}
	if h.observe != nil {
		c.x.Start = c.received
		if c.x.Start.IsZero() {
			c.x.Start = time.Now()
		}
	}
	// The client, for the observer, Admit and the engine (a scope's ECS
	// add).
	c.x.Peer = r.Peer
	c.x.ClientIP = r.Peer.Addr()
	if len(h.trusted) > 0 {
		c.x.ClientIP = ClientIP(r.Peer.Addr(), h.trusted, r.Header.Values("forwarded"), r.Header.Values("x-forwarded-for"))
	}
	if h.traceContext {
		c.x.Trace = requestTrace(r.Header)
	}
	switch r.Path {
	case h.path:
		c.onDoHPath = true
		if h.isObliviousPost(r) {
			return h.beginOblivious(c)
		}
		if r.Method == methodGet && acceptsJSON(r.Header) && !hasQueryParam(r.RawQuery, "dns") {
			return h.beginJSON(c)
		}
		return h.beginWire(c)
	case JSONPath:
		return h.beginJSON(c)
	case odoh.ConfigsPath:
		if h.oblivious != nil {
			h.serveConfigs(c)
			return true
		}
	case RelayPath:
		if h.relay != nil {
			return h.beginRelay(c)
		}
	case "/", SetupProfilePath:
		if h.setup != nil && (r.Path != "/" || acceptsHTML(r.Header)) {
			h.serveSetup(c)
			return true
		}
	}
	h.fail(c, statusNotFound, h.notFound)
	return true
}

// beginWire checks an RFC 8484 request.
func (h *Handler) beginWire(c *call) bool {
	c.x.Format = FormatWire
	r := &c.req
	var raw []byte
	switch r.Method {
	case methodGet:
		// A dns parameter longer than any DNS message's is refused
		// before any work on it (CoreDNS's CVE-2026-32936 decoded it).
		v, ok := escapedQueryParam(r.RawQuery, "dns")
		if len(v) > maxEscapedParamLen {
			h.fail(c, statusURITooLong, "URI too long: the dns parameter is longer than a DNS message of 65535 bytes can be")
			return true
		}
		if v = unescapeParam(v); !ok || v == "" {
			h.fail(c, statusBadRequest, "missing dns parameter: want ?dns=<base64url DNS query>")
			return true
		}
		var err error
		if c.in, err = decodeDNSParam(v, c.in); err != nil {
			status := statusBadRequest
			if err == errParamTooLong {
				status = statusURITooLong
			}
			h.fail(c, status, "bad dns parameter: "+err.Error())
			return true
		}
		raw = c.in
	case methodPost:
		if !isMediaType(r.Header.Get("content-type"), MediaTypeDNS) {
			h.fail(c, statusUnsupportedMediaType, "unsupported Content-Type: want "+MediaTypeDNS)
			return true
		}
		if r.ContentLength > MaxMessageSize || len(r.Body) > MaxMessageSize {
			h.fail(c, statusRequestEntityTooLarge, errTooLarge.Error())
			return true
		}
		if r.BodyErr != nil {
			h.fail(c, statusBadRequest, "reading body: "+r.BodyErr.Error())
			return true
		}
		raw = r.Body
	default:
		c.resp.Header.Add("allow", "GET, POST")
		h.fail(c, statusMethodNotAllowed, "method not allowed: use GET or POST")
		return true
	}
	return h.checkWire(c, raw)
}

// checkWire checks raw, a query in the DNS wire form (the RFC 8484
// request's, or the one an ODoH message held).
func (h *Handler) checkWire(c *call, raw []byte) bool {
	// An ordinary query is read from the bytes alone, its name made only
	// when wanted; anything else is read through (checkQuery).
	if qtype, ok := plainQueryType(raw); ok {
		c.x.QType, c.nameLater = qtype, true
		c.raw = raw
		return false
	}
	chk := checkQuery(raw)
	if chk.status != statusOK {
		h.fail(c, chk.status, chk.problem)
		return true
	}
	c.x.QName, c.x.QType = chk.qname, chk.qtype
	c.raw = raw
	if chk.rcode >= 0 {
		c.x.Problem = chk.problem
		h.writeErrorReply(c, chk.rcode)
		return true
	}
	return false
}

// beginJSON checks a JSON request: GET with name, and optionally type
// (mnemonic or number, default A), do and cd (0/1/true/false).
func (h *Handler) beginJSON(c *call) bool {
	c.x.Format = FormatJSON
	if c.req.Method != methodGet {
		c.resp.Header.Add("allow", "GET")
		h.failJSON(c, statusMethodNotAllowed, "method not allowed: the JSON form is GET only")
		return true
	}
	v, _ := url.ParseQuery(c.req.RawQuery)
	q, qname, qtype, err := jsonQuery(v, c.in[:0])
	if err != nil {
		h.failJSON(c, statusBadRequest, err.Error())
		return true
	}
	c.x.QName, c.x.QType = qname, qtype
	c.in, c.raw = q, q
	// The question read; the query made of it gets the verdict a wire
	// query gets (a meta type's DNS error).
	if v := dnswire.CheckQuery(q); v.Verdict != dnswire.Accepted {
		c.x.Problem = v.Problem
		if v.Verdict == dnswire.Unreadable { // not expected: jsonQuery made it
			h.failJSON(c, statusBadRequest, v.Problem)
			return true
		}
		h.writeErrorReply(c, v.Rcode)
		return true
	}
	return false
}

// answer asks the resolver for c.raw and builds the response from its
// reply: the one place the front end meets the engine. With wait false it
// takes only an answer the resolver has at once and reports false when
// there is none (nothing is written then; ask again with wait true). With
// wait true it reports false when the client went away meanwhile: there
// is no one to answer.
//
// The query goes to the resolver as bytes (Resolve) and its reply,
// written into c.out with the client's ID and padding, is the RFC 8484
// form's body as it is; the JSON form is written from it.
func (h *Handler) answer(ctx context.Context, c *call, wait bool) bool {
	if h.serve != nil {
		return h.pass(ctx, c, wait)
	}
	// A question is about to be resolved: Admit decides, once per
	// request (answer may be called twice: at once, then waiting).
	if h.admit != nil && !c.admitted {
		ok, retry := h.admit(c.x.ClientIP)
		if !ok {
			h.refuse(c, retry)
			return true
		}
		c.admitted = true
	}
	if c.relayHost != "" {
		return wait && h.forward(ctx, c)
	}
	byWire := c.raw != nil && (c.x.Format == FormatWire || c.oblivious)
	var r engine.Response
	if !wait {
		if h.immediate == nil || !byWire {
			return false
		}
		var tr *engine.Trace
		if h.traceContext {
			tr = &c.x.Trace
		}
		var ok bool
		if r, ok = h.immediate.AnswerNow(c.raw, c.out[:0], tr, &c.miss); !ok {
			return false
		}
	} else {
		ctx = h.questionContext(ctx, c)
		if c.miss.Ready() {
			r = h.immediate.ResolveMiss(ctx, &c.miss, c.out[:0])
		} else {
			r = h.resolver.Resolve(ctx, c.raw, c.out[:0])
		}
		if ctx.Err() != nil {
			r.Wire = nil
			c.x.Resolved, c.x.Response, c.x.Status = true, r, StatusClientClosed
			return false
		}
	}
	c.x.Resolved, c.x.Response = true, r
	if h.tap != nil {
		// Before the JSON form is written over the reply in c.out.
		h.tapClient(c, r.Wire, r.Answered)
	}
	switch {
	case len(r.Wire) < headerSize: // a resolver that breaks its contract
		h.writeErrorReply(c, dnswire.RcodeServerFailure)
	case c.x.Format == FormatJSON:
		h.writeJSON(c, r)
	default:
		h.writeWireBytes(c, r.Wire, r.Rcode, cacheControlValue(r.TTL, r.Cacheable))
	}
	if c.resp.Status == statusOK {
		h.addOperatorHeaders(c)
	}
	return true
}

// questionContext is the context c's question is resolved under: ctx,
// naming the client (for the engine's per-client limits and a scope's
// ECS add) and its protocol (for the question's events) and carrying the
// trace (when TraceContext is on).
func (h *Handler) questionContext(ctx context.Context, c *call) context.Context {
	var tr *engine.Trace
	if h.traceContext {
		tr = &c.x.Trace
	}
	qctx := c.qctx.Set(ctx, c.questionClient(), tr)
	if c.oblivious {
		c.qctx.SetProto(ProtoODoH)
	} else {
		c.qctx.SetProto(ProtoALPN(c.req.Proto))
	}
	return qctx
}

// ProtoALPN is the ALPN name (RFC 7301) of an HTTP version as Go names
// it (Request.Proto, Exchange.Proto): the proto of a question's events
// and of the request metrics; "" for another.
func ProtoALPN(httpProto string) string {
	switch httpProto {
	case "HTTP/2.0":
		return "h2"
	case "HTTP/3.0":
		return "h3"
	case "HTTP/1.1":
		return "http/1.1"
	case "HTTP/1.0":
		return "http/1.0"
	}
	return ""
}

// startMiss begins the miss answer(ctx, c, false) left in c, when the
// resolver can (MissStarter), on the caller's goroutine. answer(ctx, c,
// true) must then follow, under the same ctx, even when the client has
// gone meanwhile (mustAnswer).
func (h *Handler) startMiss(ctx context.Context, c *call, then engine.MissContinuation) bool {
	if h.starter != nil && c.miss.Ready() {
		return h.starter.StartMiss(h.questionContext(ctx, c), &c.miss, then)
	}
	return false
}

// mustAnswer reports whether the resolver began c's question (startMiss)
// and must be asked to end it, though its client has gone.
func (c *call) mustAnswer() bool { return c.miss.Started() }

// refuse answers a client over its limits: 429 with Retry-After in whole
// seconds, at least 1. The resolver is not asked.
func (h *Handler) refuse(c *call, wait time.Duration) {
	secs := max(1, int((wait+time.Second-1)/time.Second))
	c.resp.Header.Add("retry-after", itoa(secs))
	const problem = "too many requests: this client is over its limits"
	if c.x.Format == FormatJSON {
		h.failJSON(c, statusTooManyRequests, problem)
	} else {
		h.fail(c, statusTooManyRequests, problem)
	}
}

// addOperatorHeaders adds what an answer from the resolver carries beside
// the DNS message: Server-Timing and traceresponse, when on.
func (h *Handler) addOperatorHeaders(c *call) {
	// Both values are written into one buffer and made one string: one
	// allocation for the two.
	var b [80 + traceparentLen]byte
	out := b[:0]
	var fixed []string
	if h.serverTiming {
		if fixed = fixedServerTiming(c.x.Response); fixed == nil {
			out = AppendServerTiming(out, c.x.Response)
		}
	}
	timing := len(out)
	if h.traceContext {
		out = AppendTraceResponse(out, &c.x.Trace)
	}
	v := string(out)
	if h.serverTiming {
		if fixed != nil {
			c.resp.Header.Add("server-timing", fixed[0])
		} else {
			c.resp.Header.Add("server-timing", v[:timing])
		}
	}
	if h.traceContext {
		c.resp.Header.Add("traceresponse", v[timing:])
	}
}

// cancelled records a request whose client went away before its question
// was asked.
func (c *call) cancelled() { c.x.Status = StatusClientClosed }

// finish ends a request after its response was written (or dropped).
func (h *Handler) finish(c *call) {
	if h.tap != nil && c.raw != nil && !c.tapped {
		// A question answered here (a DNS error) or not at all (refused
		// by the limits, or its client went away).
		var reply []byte
		if c.x.Format == FormatWire && c.resp.Status == statusOK {
			reply = c.resp.Body
		}
		h.tapClient(c, reply, time.Time{})
	}
	if h.observe != nil && !c.page {
		if c.nameLater {
			if c.x.QName = c.x.Response.QName; c.x.QName == "" {
				c.x.QName = plainName(c.raw)
			}
		}
		c.x.Response.Wire = nil // c.out: reused once the call is
		// Until the response was ready: the resolver's answer, when it
		// gave one, is the last moment the clock was read.
		end := c.x.Response.Answered
		if end.IsZero() {
			end = time.Now()
		}
		c.x.Duration = end.Sub(c.x.Start)
		h.observe(c.x)
	}
}

// writeErrorReply answers c.raw with a DNS error made here
// (engine.AppendErrorReply), padded when the query was, in the request's
// form; such an answer is not kept (no-store).
func (h *Handler) writeErrorReply(c *call, rcode int) {
	wire := engine.AppendErrorReply(c.out[:0], c.raw, rcode)
	if engine.WantsPadding(c.raw) {
		wire = engine.PadReply(wire, 0)
	}
	if c.x.Format == FormatJSON {
		h.writeJSON(c, engine.Response{Wire: wire, Rcode: rcode})
		return
	}
	h.writeWireBytes(c, wire, rcode, cacheControlValue(0, false))
}

// writeWireBytes answers with wire, a reply ready for the client (in
// c.out), whose rcode is rcode.
func (h *Handler) writeWireBytes(c *call, wire []byte, rcode int, cacheControl string) {
	c.out = wire
	if c.oblivious {
		if h.sealOblivious(c, wire) {
			c.x.Status, c.x.Rcode = statusOK, rcode
		}
		return
	}
	c.resp.Status, c.resp.Body = statusOK, wire
	c.resp.Header = append(c.resp.Header,
		HeaderField{"content-type", MediaTypeDNS},
		HeaderField{"content-length", itoa(len(wire))},
		HeaderField{"cache-control", cacheControl})
	if c.onDoHPath {
		c.resp.Header.Add("vary", "Accept")
	}
	c.x.Status, c.x.Rcode = statusOK, rcode
}

// writeJSON writes the resolver's reply r in the JSON form.
func (h *Handler) writeJSON(c *call, r engine.Response) {
	j, err := jsonFromWire(r.Wire)
	if err != nil {
		h.failJSON(c, statusInternalServerError, "cannot read the answer: "+err.Error())
		return
	}
	body, err := json.Marshal(j) // a copy: c.out, which holds the reply, is reused
	if err != nil {
		h.failJSON(c, statusInternalServerError, "cannot encode the answer: "+err.Error())
		return
	}
	c.out = append(append(c.out[:0], body...), '\n')
	c.resp.Status, c.resp.Body = statusOK, c.out
	c.resp.Header = append(c.resp.Header,
		HeaderField{"content-type", MediaTypeJSON},
		HeaderField{"content-length", itoa(len(c.out))},
		HeaderField{"cache-control", cacheControlValue(r.TTL, r.Cacheable)})
	if c.onDoHPath {
		c.resp.Header.Add("vary", "Accept")
	}
	c.x.Status, c.x.Rcode = statusOK, r.Rcode
}

// fail answers with an HTTP error and a short text saying what is wrong.
func (h *Handler) fail(c *call, status int, problem string) {
	c.x.Status, c.x.Problem = status, problem
	c.out = append(append(c.out[:0], problem...), '\n')
	c.resp.Status, c.resp.Body = status, c.out
	c.resp.Header = append(c.resp.Header,
		HeaderField{"content-type", "text/plain; charset=utf-8"},
		HeaderField{"cache-control", "no-store"},
		HeaderField{"x-content-type-options", "nosniff"},
		HeaderField{"content-length", itoa(len(c.out))})
}

// failJSON answers a JSON request with an HTTP error and {"error": "..."}.
func (h *Handler) failJSON(c *call, status int, problem string) {
	c.x.Status, c.x.Problem = status, problem
	body, _ := json.Marshal(jsonError{Error: problem})
	c.out = append(append(c.out[:0], body...), '\n')
	c.resp.Status, c.resp.Body = status, c.out
	c.resp.Header = append(c.resp.Header,
		HeaderField{"content-type", "application/json"},
		HeaderField{"cache-control", "no-store"},
		HeaderField{"content-length", itoa(len(c.out))})
}

// smallInts are the decimal forms of common lengths, so most responses
// set Content-Length without allocating.
var smallInts = func() []string {
	v := make([]string, 2048)
	for i := range v {
		v[i] = strconv.Itoa(i)
	}
	return v
}()

func itoa(n int) string {
	if n >= 0 && n < len(smallInts) {
		return smallInts[n]
	}
	return strconv.Itoa(n)
}

// requestTrace is RequestTrace over the core's header list.
func requestTrace(h Header) engine.Trace {
	var tp [1]string
	n := 0
	for i := range h {
		if h[i].Name == "traceparent" {
			if n == 0 {
				tp[0] = h[i].Value
			}
			n++
		}
	}
	if n != 1 {
		return NewTrace(nil)
	}
	return NewTrace(tp[:])
}

// tapClient hands the wiretap c's question and reply (nil: none was sent),
// answered at answered (zero: now).
func (h *Handler) tapClient(c *call, reply []byte, answered time.Time) {
	c.tapped = true
	received := c.x.Start
	if received.IsZero() {
		received = c.received
	}
	if answered.IsZero() {
		answered = time.Now()
	}
	if received.IsZero() {
		received = answered
	}
	if len(reply) < headerSize {
		reply = nil
	}
	wiretap.Client(h.tap, wiretap.DoH, c.req.Peer, c.req.Local, c.raw, received, reply, answered)
}
