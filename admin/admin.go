// Package admin serves dohfwd's operator endpoints: GET /status (the
// engine's scopes, servers, demotion, counters and in-flight as JSON),
// GET /metrics (Prometheus) and GET /healthz.
package admin

import (
	"encoding/json"
	"net/http"
	"os"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/dohfwd/dohfwd/engine"
)

// StatusSource gives the engine's status snapshot.
type StatusSource interface {
	Status() engine.Status
}

// Status is the body of GET /status: the engine's snapshot and where the
// running configuration came from.
type Status struct {
	Version string    `json:"version"`
	Config  string    `json:"config"`
	Started time.Time `json:"started"`
	// Process figures, for soak tests and leak hunts: goroutines, open
	// descriptors (-1 where /proc/self/fd cannot be read) and client
	// connections open (the limits' count; 0 without one).
	Goroutines  int   `json:"goroutines"`
	OpenFiles   int   `json:"open_files"`
	Connections int64 `json:"connections"`
	engine.Status
}

// Info describes the running process for /status.
type Info struct {
	Version string
	// Config returns the source of the configuration in use; it changes on
	// reload.
	Config  func() string
	Started time.Time
	// Connections, if set, counts the client connections open.
	Connections func() int64
}

// Handler returns the admin endpoints. gatherer may be nil (no /metrics).
func Handler(src StatusSource, gatherer prometheus.Gatherer, info Info) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		st := Status{Version: info.Version, Started: info.Started, Status: src.Status()}
		if info.Config != nil {
			st.Config = info.Config()
		}
		st.Goroutines, st.OpenFiles = runtime.NumGoroutine(), openFiles()
		if info.Connections != nil {
			st.Connections = info.Connections()
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(st)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.Write([]byte("ok\n"))
	})
	if gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	}
	return mux
}

// openFiles counts this process's open descriptors, or -1.
func openFiles() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents) - 1 // less the directory ReadDir held open
}
