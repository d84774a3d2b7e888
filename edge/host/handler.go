package host

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dohfwd/dohfwd/doh"
	"github.com/dohfwd/dohfwd/edge/abi"
)

var requestBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// forwarded are abi.ForwardedHeaders as a doh.Request names them, but
// Content-Length, which is passed from Request.ContentLength.
var forwarded = func() []string {
	var names []string
	for _, k := range abi.ForwardedHeaders {
		if k != "Content-Length" {
			names = append(names, strings.ToLower(k))
		}
	}
	return names
}()

// Handler serves DoH by passing each whole request to an instance of the
// pool (abi.EventRequest), whose own DoH handler answers it: the Workers
// glue's way. It is a doh.RequestServer: doh.HandlerFor(h) serves it with
// the native listeners and HTTP/2 server. dohfwd-edge does not use it (its
// front end is native and hands the module questions: Pool.Resolve);
// it stays so that the module's DoH path is tested under wazero too.
type Handler struct {
	Pool *Pool
	// Observe, if set, is told of each request at its end, as the native
	// DoH handler tells its observer (assembly.Dohfwd.Observe): the
	// module's instances have no metrics of their own.
	Observe func(doh.Exchange)
}

var _ doh.RequestServer = Handler{}

// ServeRequest hands r to an instance of the pool and returns its answer.
// ok is false when the client went away meanwhile.
func (h Handler) ServeRequest(ctx context.Context, r *doh.Request) (resp doh.Response, ok bool) {
	x := doh.Exchange{Method: r.Method, Proto: r.Proto, Rcode: -1, Start: time.Now()}
	if h.Observe != nil {
		defer func() { h.Observe(x) }()
	}
	bp := requestBuffers.Get().(*[]byte)
	defer requestBuffers.Put(bp)
	target := r.Path
	if r.RawQuery != "" {
		target += "?" + r.RawQuery
	}
	req := abi.Request{Method: r.Method, Target: target, Body: r.Body}
	if r.Peer.IsValid() {
		req.Remote = r.Peer.String()
	}
	req.Headers = append(make([][2]string, 0, 4), [2]string{"Host", r.Host})
	if r.ContentLength >= 0 {
		req.Headers = append(req.Headers, [2]string{"Content-Length", strconv.FormatInt(r.ContentLength, 10)})
	}
	for _, f := range r.Header {
		for _, k := range forwarded {
			if f.Name == k {
				req.Headers = append(req.Headers, [2]string{f.Name, f.Value})
			}
		}
	}
	enc := abi.AppendRequest((*bp)[:0], &req)
	*bp = enc
	out, err := h.Pool.Serve(ctx, enc)
	if err != nil {
		if ctx.Err() != nil {
			x.Status = doh.StatusClientClosed
			return doh.Response{}, false // the client went away while waiting for an instance
		}
		x.Status = 500
		return fail(x.Status, err), true
	}
	m, err := abi.ParseResponse(out)
	if err != nil {
		x.Status = 500
		return fail(x.Status, err), true
	}
	if m.Status == doh.StatusClientClosed {
		x.Status = m.Status
		return doh.Response{}, false
	}
	x.Status = m.Status
	if h.Observe != nil {
		// The module's own log has its bad requests (with the client's
		// address); here they are only counted.
		x.Rcode = rcodeOf(&m)
	}
	// The module's fields, as HTTP/2 names them, with the body's own
	// length (out is this call's: the body may be written later).
	resp = doh.Response{Status: m.Status, Body: m.Body, Header: make(doh.Header, 0, len(m.Headers)+1)}
	for _, kv := range m.Headers {
		if name := strings.ToLower(kv[0]); name != "content-length" {
			resp.Header.Add(name, kv[1])
		}
	}
	resp.Header.Add("content-length", strconv.Itoa(len(m.Body)))
	return resp, true
}

// fail is a 500 saying what went wrong between the host and the module.
func fail(status int, err error) doh.Response {
	body := []byte(err.Error() + "\n")
	return doh.Response{Status: status, Body: body, Header: doh.Header{
		{Name: "content-type", Value: "text/plain; charset=utf-8"},
		{Name: "x-content-type-options", Value: "nosniff"},
		{Name: "content-length", Value: strconv.Itoa(len(body))},
	}}
}

// rcodeOf reads the DNS rcode of the module's wire or JSON answer; -1
// when it holds no DNS message.
func rcodeOf(resp *abi.Response) int {
	var ctype string
	for _, kv := range resp.Headers {
		if strings.EqualFold(kv[0], "Content-Type") {
			ctype = kv[1]
		}
	}
	switch {
	case resp.Status >= 400:
		return -1
	case ctype == doh.MediaTypeDNS && len(resp.Body) >= 12:
		// The header's rcode: the engine's answers carry no extended one.
		return int(resp.Body[3] & 0x0f)
	case strings.HasPrefix(ctype, doh.MediaTypeJSON):
		var j struct{ Status *int }
		if json.Unmarshal(resp.Body, &j) == nil && j.Status != nil {
			return *j.Status
		}
	}
	return -1
}
