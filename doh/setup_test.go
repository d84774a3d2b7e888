//go:build !wasip1

package doh

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// The setup pages are the Setup handler's: GET / for a browser and the
// Apple profile. Without Accept: text/html, or without a Setup handler,
// / stays a 404; DoH requests are unaffected.
func TestSetupPathsGoToTheSetupHandler(t *testing.T) {
	setup := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(299) })
	for _, tc := range []struct {
		setup  http.Handler
		path   string
		accept string
		status int
	}{
		{setup, "/", "text/html,application/xhtml+xml", 299},
		{setup, "/", "*/*", http.StatusNotFound},
		{setup, SetupProfilePath, "*/*", 299},
		{nil, "/", "text/html", http.StatusNotFound},
		{nil, SetupProfilePath, "*/*", http.StatusNotFound},
	} {
		h := NewHandler(new(recordingResolver), Options{Setup: tc.setup})
		r := httptest.NewRequest(http.MethodGet, tc.path, nil)
		r.Header.Set("Accept", tc.accept)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.status {
			t.Errorf("setup %v, GET %s Accept %s: %d, want %d", tc.setup != nil, tc.path, tc.accept, w.Code, tc.status)
		}
	}
	h := NewHandler(new(recordingResolver), Options{Setup: setup})
	r := httptest.NewRequest(http.MethodGet, "/dns-query?dns=AAABAAABAAAAAAAAA3d3dwdleGFtcGxlA2NvbQAAAQAB", nil)
	r.Header.Set("Accept", "text/html")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusOK || w.Header().Get("Content-Type") != MediaTypeDNS {
		t.Errorf("DoH GET with Accept text/html: %d %s", w.Code, w.Header().Get("Content-Type"))
	}
}
