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
