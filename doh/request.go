package doh

import (
	"bytes"
	"context"
	"slices"
)

// ServeRequest answers one request that a transport holds whole in memory
// (the WebAssembly module's host hands it over read): the same core as
// ServeHTTP and the HTTP/2 server, without net/http. ctx is the client's
// budget. When the client went away before the answer, ok is false and
// there is nothing to send. req is not kept (of its body, what a DNS
// message can hold and a byte more); the response is the caller's.
func (h *Handler) ServeRequest(ctx context.Context, req *Request) (resp Response, ok bool) {
	c := getCall()
	defer putCall(c)
	hdr, body := c.req.Header, c.req.Body
	c.req = *req
	c.req.Header = append(hdr[:0], req.Header...)
	c.req.Body = append(body[:0], req.Body[:min(len(req.Body), MaxMessageSize+1)]...) // enough to refuse
	if !h.begin(c) && !h.answer(ctx, c, true) {
		h.finish(c) // the client went away: no one to answer
		return Response{}, false
	}
	resp = Response{Status: c.resp.Status, Header: slices.Clone(c.resp.Header), Body: bytes.Clone(c.resp.Body)}
	h.finish(c)
	return resp, true
}

// RequestServer answers one DoH request held whole in memory, as
// [Handler.ServeRequest] does. It exists so that a server whose DoH
// semantics live elsewhere (the edge host, whose requests are answered by
// the WebAssembly module's own Handler) is served by this package's
// listeners, HTTP/2 server and HTTP/1.1 adapter, the native front, without
// the front knowing what answers: see [HandlerFor].
//
// ctx ends when the client goes away; ok false means there is nothing to
// send. req is not kept past the call. The response, body included, is
// the caller's: it may be written well after ServeRequest returns (HTTP/2
// flow control), so it must not share memory the callee reuses.
type RequestServer interface {
	ServeRequest(ctx context.Context, req *Request) (resp Response, ok bool)
}

// HandlerFor returns a Handler that hands every request to rs: every
// path, method and status is rs's answer; the Handler adds only the
// transport (Date, framing). A request waits for rs on a goroutine of its
// own, as a question that goes upstream does. Observe is rs's to do.
func HandlerFor(rs RequestServer) *Handler {
	return &Handler{serve: rs}
}

// pass answers c with h.serve: only waiting (rs may go to the network),
// so with wait false it reports false and nothing is done.
func (h *Handler) pass(ctx context.Context, c *call, wait bool) bool {
	if !wait {
		return false
	}
	resp, ok := h.serve.ServeRequest(ctx, &c.req)
	if !ok || ctx.Err() != nil {
		c.x.Status = StatusClientClosed
		return false
	}
	c.x.Status = resp.Status
	c.resp.Status, c.resp.Body = resp.Status, resp.Body
	c.resp.Header = append(c.resp.Header, resp.Header...)
	return true
}
