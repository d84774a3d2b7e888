//go:build !wasip1

package doh

import (
	"net/http"
	"net/url"
	"strings"
)

// SetupPages serves the device setup pages (package setup): natively an
// http.Handler. The module has none (and links no net/http): see
// setup_wasip1.go.
type SetupPages = http.Handler

// serveSetup answers c with Options.Setup, for either transport: the
// setup handler is an http.Handler, so c.req is made an *http.Request and
// what the handler writes is recorded into c.resp. A page, not a DNS
// exchange: it is not observed.
func (h *Handler) serveSetup(c *call) {
	c.page = true
	r := &c.req
	hr := &http.Request{
		Method:     r.Method,
		URL:        &url.URL{Path: r.Path, RawQuery: r.RawQuery},
		Proto:      r.Proto,
		Host:       r.Host,
		Header:     make(http.Header, len(r.Header)),
		RemoteAddr: r.Peer.String(),
		RequestURI: r.Path,
	}
	hr.ProtoMajor, hr.ProtoMinor, _ = http.ParseHTTPVersion(r.Proto)
	for _, f := range r.Header {
		k := http.CanonicalHeaderKey(f.Name)
		hr.Header[k] = append(hr.Header[k], f.Value)
	}
	rec := &pageRecorder{c: c, header: http.Header{}}
	h.setup.ServeHTTP(rec, hr)
	rec.WriteHeader(http.StatusOK) // a handler that wrote nothing
	c.resp.Body = c.out
	if c.resp.Header.Get("content-length") == "" && r.Method != http.MethodHead {
		c.resp.Header.Add("content-length", itoa(len(c.out)))
	}
}

// pageRecorder is the http.ResponseWriter of a setup page: headers and
// status into c.resp, the body into c.out.
type pageRecorder struct {
	c      *call
	header http.Header
	wrote  bool
}

func (w *pageRecorder) Header() http.Header { return w.header }

func (w *pageRecorder) WriteHeader(status int) {
	if w.wrote {
		return
	}
	w.wrote = true
	w.c.resp.Status = status
	for k, vs := range w.header {
		for _, v := range vs {
			w.c.resp.Header.Add(strings.ToLower(k), v)
		}
	}
}

func (w *pageRecorder) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	w.c.out = append(w.c.out, b...)
	return len(b), nil
}
