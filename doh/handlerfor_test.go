//go:build !wasip1

package doh

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// echoServer is a RequestServer that answers every request with 418 and
// what it was given, and keeps the requests.
type echoServer struct {
	mu   sync.Mutex
	reqs []Request
}

func (e *echoServer) ServeRequest(ctx context.Context, r *Request) (Response, bool) {
	e.mu.Lock()
	e.reqs = append(e.reqs, Request{Method: r.Method, Path: r.Path, RawQuery: r.RawQuery, Proto: r.Proto,
		Header: append(Header(nil), r.Header...), Body: append([]byte(nil), r.Body...), ContentLength: r.ContentLength})
	e.mu.Unlock()
	body := []byte(r.Method + " " + r.Path + "?" + r.RawQuery + " " + string(r.Body))
	return Response{Status: 418, Body: body, Header: Header{{"content-type", "text/plain"}, {"x-served-by", "echo"},
		{"content-length", itoa(len(body))}}}, true
}

// HandlerFor hands every request, whatever its path or method, to the
// RequestServer, over HTTP/2 (this package's server) and HTTP/1.1 alike,
// and writes its answer as it is.
func TestHandlerForPassesEverything(t *testing.T) {
	rs := &echoServer{}
	h := HandlerFor(rs)
	h2url, h2client := startTLS(t, h, Limits{})
	h1url := startPlain(t, h)
	for _, c := range []struct {
		name, url string
		client    *http.Client
		proto     string
	}{{"h2", h2url, h2client, "HTTP/2.0"}, {"h1", h1url, http.DefaultClient, "HTTP/1.1"}} {
		t.Run(c.name, func(t *testing.T) {
			for _, r := range []struct{ method, path, body string }{
				{"GET", "/anywhere?x=1", ""},
				{"POST", "/dns-query", "not a DNS message"},
				{"DELETE", "/", ""},
			} {
				req, _ := http.NewRequest(r.method, c.url+r.path, strings.NewReader(r.body))
				resp, err := c.client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				path, query, _ := strings.Cut(r.path, "?")
				want := r.method + " " + path + "?" + query + " " + r.body
				if resp.StatusCode != 418 || resp.Header.Get("X-Served-By") != "echo" || string(body) != want || resp.Proto != c.proto {
					t.Fatalf("%s %s: %s %d %v %q, want %s 418 from the request server with %q", r.method, r.path, resp.Proto, resp.StatusCode, resp.Header, body, c.proto, want)
				}
			}
		})
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if len(rs.reqs) != 6 || rs.reqs[0].Proto != "HTTP/2.0" || rs.reqs[3].Proto != "HTTP/1.1" {
		t.Fatalf("the request server saw %d requests (%v), want 3 over HTTP/2 and then 3 over HTTP/1.1", len(rs.reqs), rs.reqs)
	}
}

// A client that goes away while the RequestServer works cancels its ctx,
// and nothing is written for it.
func TestHandlerForCancelsGoneClient(t *testing.T) {
	started, seen := make(chan struct{}), make(chan error, 1)
	h := HandlerFor(requestServerFunc(func(ctx context.Context, r *Request) (Response, bool) {
		close(started)
		<-ctx.Done()
		seen <- ctx.Err()
		return Response{}, false
	}))
	url, client := startTLS(t, h, Limits{})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", url+"/dns-query?dns=AAAB", nil)
	errc := make(chan error, 1)
	go func() {
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	<-started
	cancel()
	if err := <-seen; err == nil {
		t.Fatal("the request server's context did not end with the client")
	}
	if err := <-errc; err == nil {
		t.Fatal("the client got a response after it went away")
	}
}

type requestServerFunc func(context.Context, *Request) (Response, bool)

func (f requestServerFunc) ServeRequest(ctx context.Context, r *Request) (Response, bool) {
	return f(ctx, r)
}
