package host

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dohfwd/dohfwd/doh"
	"github.com/dohfwd/dohfwd/edge/abi"
)

// maxBody is one byte more than the largest DoH body, so the module's
// handler still sees an oversized body as oversized (413).
const maxBody = 65535 + 1

var requestBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// Handler serves DoH by passing each request to an instance of the pool.
type Handler struct {
	Pool *Pool
	// Observe, if set, is told of each request at its end, as the native
	// DoH handler tells its observer (assembly.Dohfwd.Observe): the
	// module's instances have no metrics of their own.
	Observe func(doh.Exchange)
}

func (h Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	x := doh.Exchange{Method: r.Method, Proto: r.Proto, Rcode: -1, Start: time.Now()}
	if h.Observe != nil {
		defer func() { h.Observe(x) }()
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		x.Status, x.Problem = http.StatusBadRequest, "reading body: "+err.Error()
		http.Error(w, x.Problem, x.Status)
		return
	}
	bp := requestBuffers.Get().(*[]byte)
	defer requestBuffers.Put(bp)
	req := abi.Request{Method: r.Method, Target: r.URL.RequestURI(), Remote: r.RemoteAddr, Body: body}
	req.Headers = append(req.Headers, [2]string{"Host", r.Host})
	for _, k := range abi.ForwardedHeaders {
		for _, v := range r.Header.Values(k) {
			req.Headers = append(req.Headers, [2]string{k, v})
		}
	}
	enc := abi.AppendRequest((*bp)[:0], &req)
	*bp = enc
	out, err := h.Pool.Serve(r.Context(), enc)
	if err != nil {
		if r.Context().Err() != nil {
			x.Status = doh.StatusClientClosed
			return // the client went away while waiting for an instance
		}
		x.Status = http.StatusInternalServerError
		http.Error(w, err.Error(), x.Status)
		return
	}
	resp, err := abi.ParseResponse(out)
	if err != nil {
		x.Status = http.StatusInternalServerError
		http.Error(w, err.Error(), x.Status)
		return
	}
	x.Status = resp.Status
	if h.Observe != nil {
		// The module's own log has its bad requests (with the client's
		// address); here they are only counted.
		x.Rcode = rcodeOf(&resp)
	}
	hdr := w.Header()
	for _, kv := range resp.Headers {
		hdr.Add(kv[0], kv[1])
	}
	hdr.Set("Content-Length", strconv.Itoa(len(resp.Body)))
	w.WriteHeader(resp.Status)
	w.Write(resp.Body)
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
