//go:build !wasip1

package doh

import (
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/wiretap"
)

// ServeHTTP serves one request that net/http read (HTTP/1.1) or quic-go's
// http3 server (HTTP/3): it is turned into a [Request], goes through the
// same core as the HTTP/2 server's streams, and the [Response] is written
// back. The request context is the resolver's: a client that goes away
// cancels its question.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c := getCall()
	defer putCall(c)
	req := &c.req
	req.Method, req.Path, req.RawQuery, req.Proto, req.Host = r.Method, r.URL.Path, r.URL.RawQuery, r.Proto, r.Host
	req.ContentLength = r.ContentLength
	for k, vs := range r.Header {
		name := lowerName(k)
		for _, v := range vs {
			req.Header.Add(name, v)
		}
	}
	if peer, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		req.Peer = netip.AddrPortFrom(peer.Addr().Unmap(), peer.Port())
	}
	if h.tap != nil {
		if local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
			req.Local = wiretap.AddrPort(local)
		}
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
	for i, f := range c.resp.Header {
		k := canonicalName(f.Name)
		if seenBefore(c.resp.Header[:i], f.Name) {
			old := hdr[k]
			hdr[k] = append(old[:len(old):len(old)], f.Value)
		} else {
			hdr[k] = headerValue(f.Value)
		}
	}
	w.WriteHeader(c.resp.Status)
	w.Write(c.resp.Body)
	h.finish(c)
}

// seenBefore reports whether name is among the fields before it: then
// its value is added to theirs, else it sets the header.
func seenBefore(fields Header, name string) bool {
	for _, f := range fields {
		if f.Name == name {
			return true
		}
	}
	return false
}

// lowerName is the HTTP/2 form of a canonical header name, the common ones
// without allocating.
func lowerName(k string) string {
	switch k {
	case "Accept":
		return "accept"
	case "Content-Type":
		return "content-type"
	case "Content-Length":
		return "content-length"
	case "User-Agent":
		return "user-agent"
	case "Accept-Encoding":
		return "accept-encoding"
	case "Forwarded":
		return "forwarded"
	case "X-Forwarded-For":
		return "x-forwarded-for"
	case "Traceparent":
		return "traceparent"
	}
	return strings.ToLower(k)
}

// canonicalName is the net/http form of a header name the core writes.
func canonicalName(n string) string {
	switch n {
	case "content-type":
		return "Content-Type"
	case "content-length":
		return "Content-Length"
	case "cache-control":
		return "Cache-Control"
	case "vary":
		return "Vary"
	case "allow":
		return "Allow"
	case "x-content-type-options":
		return "X-Content-Type-Options"
	case "alt-svc":
		return "Alt-Svc"
	}
	return http.CanonicalHeaderKey(n)
}

// headerValue is a one-value header list; the values the core writes most
// (media types, small lengths, common max-ages) are shared, since net/http
// only reads them.
func headerValue(v string) []string {
	if s, ok := sharedValues[v]; ok {
		return s
	}
	return []string{v}
}

var sharedValues = func() map[string][]string {
	m := map[string][]string{}
	for _, v := range []string{MediaTypeDNS, MediaTypeJSON, "text/plain; charset=utf-8", "application/json",
		"no-store", "nosniff", "Accept", "GET, POST", "GET"} {
		m[v] = []string{v}
	}
	for _, v := range append(smallInts[:1024:1024], smallMaxAges...) {
		m[v] = []string{v}
	}
	return m
}()

// RequestTrace returns the trace of a request with headers h: the
// caller's from traceparent, else a new one; its span is new either way.
func RequestTrace(h http.Header) engine.Trace { return NewTrace(h["Traceparent"]) }
