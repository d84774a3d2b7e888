package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
)

func TestDialableRewritesWildcardToLoopback(t *testing.T) {
	for in, want := range map[string]string{
		"0.0.0.0:9153":   "127.0.0.1:9153",
		":9153":          "127.0.0.1:9153",
		"[::]:9153":      "[::1]:9153",
		"127.0.0.2:9153": "127.0.0.2:9153",
		"[::1]:9153":     "[::1]:9153",
	} {
		if got := dialable(in); got != want {
			t.Errorf("dialable(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestHealthcheckCommand(t *testing.T) {
	healthy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte("ok\n"))
	}))
	defer healthy.Close()
	sick := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "draining", http.StatusServiceUnavailable)
	}))
	defer sick.Close()
	// A port that was listening and is now closed: connection refused.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()

	// --config: the admin address comes from listen.admin, wildcard or not.
	_, port, _ := net.SplitHostPort(healthy.Listener.Addr().String())
	cfgFile := filepath.Join(t.TempDir(), "dohfwd.yaml")
	if err := os.WriteFile(cfgFile, []byte("listen:\n  admin: 0.0.0.0:"+port+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		args []string
		want int
	}{
		{"healthy", []string{"--admin", healthy.Listener.Addr().String()}, 0},
		{"from config", []string{"--config", cfgFile}, 0},
		{"503", []string{"--admin", sick.Listener.Addr().String()}, 1},
		{"refused", []string{"--admin", closed}, 1},
		{"bad flag", []string{"--nope"}, 2},
	} {
		var stderr bytes.Buffer
		if got := run(context.Background(), append([]string{"healthcheck"}, tc.args...), new(bytes.Buffer), &stderr); got != tc.want {
			t.Errorf("%s: dohfwd healthcheck %v = %d, want %d (stderr %q)", tc.name, tc.args, got, tc.want, stderr.String())
		}
	}
}
