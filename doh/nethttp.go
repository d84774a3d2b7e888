package doh

import (
	"net/http"
	"net/netip"
	"strings"
)

// ServeHTTP serves one request that net/http read (HTTP/1.1, and the
// edge module's requests): it is turned into a [Request], goes through the
// same core as the HTTP/2 server's streams, and the [Response] is written
// back. The request context is the resolver's: a client that goes away
// cancels its question.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c := getCall()
	defer putCall(c)
	req := &c.req
	req.Method, req.Path, req.RawQuery, req.Proto = r.Method, r.URL.Path, r.URL.RawQuery, r.Proto
	req.ContentLength = r.ContentLength
	for k, vs := range r.Header {
		name := strings.ToLower(k)
		for _, v := range vs {
			req.Header.Add(name, v)
		}
	}
	if peer, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		req.Peer = netip.AddrPortFrom(peer.Addr().Unmap(), peer.Port())
	}
	if r.Method == http.MethodPost && r.ContentLength <= MaxMessageSize && r.Body != nil {
		req.Body, req.BodyErr = readMessage(r.Body, req.Body[:0])
		if req.BodyErr == errTooLarge {
			req.BodyErr = nil // len(Body) says it
		}
	}

	if !h.begin(c) && !h.answer(r.Context(), c, true) {
		h.finish(c) // the client went away: no one to answer
		return
	}
	hdr := w.Header()
	for _, f := range c.resp.Header {
		hdr[http.CanonicalHeaderKey(f.Name)] = append(hdr[http.CanonicalHeaderKey(f.Name)], f.Value)
	}
	w.WriteHeader(c.resp.Status)
	w.Write(c.resp.Body)
	h.finish(c)
}
