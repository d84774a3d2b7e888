package host

import (
	"io"
	"net/http"
	"strconv"
	"sync"

	"github.com/dohfwd/dohfwd/edge/abi"
)

// maxBody is one byte more than the largest DoH body, so the module's
// handler still sees an oversized body as oversized (413).
const maxBody = 65535 + 1

// forwardedHeaders are the request headers the DoH handling reads.
var forwardedHeaders = []string{
	"Accept", "Content-Type", "Content-Length", "X-Forwarded-For", "Forwarded", "User-Agent",
}

var requestBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// Handler serves DoH by passing each request to an instance of the pool.
type Handler struct {
	Pool *Pool
}

func (h Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		http.Error(w, "reading body: "+err.Error(), http.StatusBadRequest)
		return
	}
	bp := requestBuffers.Get().(*[]byte)
	defer requestBuffers.Put(bp)
	req := abi.Request{Method: r.Method, Target: r.URL.RequestURI(), Remote: r.RemoteAddr, Body: body}
	req.Headers = append(req.Headers, [2]string{"Host", r.Host})
	for _, k := range forwardedHeaders {
		for _, v := range r.Header.Values(k) {
			req.Headers = append(req.Headers, [2]string{k, v})
		}
	}
	enc := abi.AppendRequest((*bp)[:0], &req)
	*bp = enc
	out, err := h.Pool.Serve(r.Context(), enc)
	if err != nil {
		if r.Context().Err() != nil {
			return // the client went away while waiting for an instance
		}
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	resp, err := abi.ParseResponse(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	hdr := w.Header()
	for _, kv := range resp.Headers {
		hdr.Add(kv[0], kv[1])
	}
	hdr.Set("Content-Length", strconv.Itoa(len(resp.Body)))
	w.WriteHeader(resp.Status)
	w.Write(resp.Body)
}
