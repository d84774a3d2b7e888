// Package abi is the contract between dohfwd's WebAssembly module and its
// hosts: the names of the imports and exports, the socket error codes, and
// the byte layout of a DoH request and response as they cross the module's
// memory. The module (edge/module), the wazero host (edge/host) and the
// JavaScript glue (edge/workers: worker.mjs, sockets.mjs) all follow it.
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
// Socket imports return 0 for success, an engine.ErrorClass value (1..7),
// or Cancelled.
package abi

import (
	"encoding/binary"
	"errors"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/telemetry"
)

// ImportModule is the Wasm import module of the socket interface.
const ImportModule = "dohfwd"

// The socket imports (see edge/module/network.go for their signatures).
const (
	ImportOpen  = "sock_open"
	ImportSend  = "sock_send"
	ImportRecv  = "sock_recv"
	ImportClose = "sock_close"
)

// The exports. The module keeps one buffer: the host asks for its address
// with dohfwd_buffer(n) (growing it to n bytes if needed; 0 just asks),
// writes its input there, calls the export with the input's length, and
// reads the output, whose length the export returns, from the address
// dohfwd_buffer(0) gives afterwards.
const (
	ExportBuffer = "dohfwd_buffer" // (n u32) -> ptr u32
	ExportInit   = "dohfwd_init"   // (len, flags u32) -> errlen u32: config YAML in; 0, or the error text's length
	ExportServe  = "dohfwd_serve"  // (len u32) -> len u32: a Request in, a Response out
	ExportStatus = "dohfwd_status" // () -> len u32: a Status as JSON
	// (len u32) -> errlen u32: an engine.Config as JSON in (a reload); 0, or the error text's length
	ExportReconfigure = "dohfwd_reconfigure"
)

// Flags of dohfwd_init.
const (
	// InitTCPOnly starts the engine with TCP as the first transport of
	// every attempt, for hosts without UDP (Cloudflare Workers).
	InitTCPOnly = 1
)

// ForwardedHeaders are the request headers a host passes to the module
// (with Host): the ones the DoH handling reads. Hosts keep the rest.
var ForwardedHeaders = []string{
	"Accept", "Content-Type", "Content-Length", "X-Forwarded-For", "Forwarded", "User-Agent",
}

// Cancelled is the code a socket import returns when the request it
// serves has gone (the client disconnected) before or while it waited. It
// is not an engine.ErrorClass: the module first cancels the request's
// context, then hands the engine a closed socket, so the engine counts the
// transaction cancelled and charges nothing to the server, as it does
// natively when the client goes away.
const Cancelled = 8

// Transport codes for sock_open.
const (
	TransportUDP = 0
	TransportTCP = 1
)

// RecvInfoSize is the size of the record sock_recv fills: the byte count
// (uint32), the peer's port (uint16), two bytes of padding, and the peer's
// address as 16 bytes (IPv4 mapped into IPv6).
const RecvInfoSize = 24

// Status is what dohfwd_status returns, as JSON: the instance's engine
// status (its fields at the top level, as engine.Status marshals) and the
// attempt latencies of its servers, which its host exports with its own
// metrics (the module has no Prometheus).
type Status struct {
	engine.Status
	AttemptLatency map[string]telemetry.Histogram `json:"attempt_latency,omitempty"`
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

var errShort = errors.New("abi: message cut short")

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
