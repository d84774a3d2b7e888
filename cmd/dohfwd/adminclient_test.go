package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestAdminGetErrors: the status and explain commands say which admin
// listener and path failed, with the admin's own message when it sent
// one, and decode a 200 answer.
func TestAdminGetErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/explain":
			w.WriteHeader(http.StatusBadRequest)
			w.Write([]byte(`{"error":"unknown type \"BOGUS\""}`))
		case "/status":
			w.Write([]byte(`{"version":"v1"}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")

	var v struct{ Version string }
	if err := adminGet(context.Background(), addr, "/status", &v); err != nil || v.Version != "v1" {
		t.Fatalf("status: %v %+v", err, v)
	}
	err := adminGet(context.Background(), addr, "/explain?name=x&type=BOGUS", &v)
	if err == nil || !strings.Contains(err.Error(), "GET /explain: 400 Bad Request: unknown type \"BOGUS\"") || !strings.Contains(err.Error(), addr) {
		t.Errorf("explain error: %v", err)
	}
	err = adminGet(context.Background(), addr, "/nothing", &v)
	if err == nil || !strings.HasSuffix(err.Error(), "GET /nothing: 404 Not Found") {
		t.Errorf("404 error: %v", err)
	}
}
