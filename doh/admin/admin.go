// Package admin serves dohfwd's operator endpoints: GET /status (the
// engine's scopes, servers, demotion, counters and in-flight as JSON),
// GET /explain (what a question would do, as JSON), GET /metrics
// (Prometheus), GET /healthz, and GET / (a live status page over /status
// and /metrics).
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
	"github.com/dohfwd/dohfwd/engine/dnswire"
)

// StatusSource gives the engine's status snapshot.
type StatusSource interface {
	Status() engine.Status
}

// Explainer explains the question of a wire query without asking anyone;
// *engine.Engine is one.
type Explainer interface {
	Explain(query []byte) (engine.Explanation, error)
}

var _ Explainer = (*engine.Engine)(nil)

// Status is the body of GET /status: the engine's snapshot and where the
// running configuration came from. Now is the server's clock, so a page
// can count demotions down without trusting the browser's.
type Status struct {
	Version string    `json:"version"`
	Config  string    `json:"config"`
	Started time.Time `json:"started"`
	Now     time.Time `json:"now"`
	// Process figures, for soak tests and leak hunts: goroutines, open
	// descriptors (-1 where /proc/self/fd cannot be read) and client
	// connections open (the limits' count; 0 without one).
	Goroutines  int   `json:"goroutines"`
	OpenFiles   int   `json:"open_files"`
	Connections int64 `json:"connections"`
	// Transports are the DNS listeners' counters by transport.
	Transports map[string]TransportCounters `json:"transports,omitempty"`
	// Dnstap counts the dnstap messages written to the collector and
	// those dropped (a full queue, a failed write); zeros when off.
	Dnstap DnstapStatus `json:"dnstap"`
	engine.Status
}

// DnstapStatus is /status's dnstap.
type DnstapStatus struct {
	Sent    uint64 `json:"sent"`
	Dropped uint64 `json:"dropped"`
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
	// Dnstap, if set, counts the dnstap messages written and dropped.
	Dnstap func() (sent, dropped uint64)
	// Transports, if set, gives the DNS listeners' counters by transport
	// (dot, doq, dns).
	Transports func() map[string]TransportCounters
}

// TransportCounters are one transport's totals in /status: a DNS
// listener's (dot, doq, dns) questions, and a QUIC listener's (doq, h3)
// Retries. A field a transport does not have is left out: HTTP/3's
// requests are dohfwd_doh_requests_total's, by proto.
type TransportCounters struct {
	// Questions put to the engine (or refused for the client's limits).
	Questions *uint64 `json:"questions,omitempty"`
	// QUICRetries counts new QUIC connections asked to validate their
	// address with a Retry.
	QUICRetries *uint64 `json:"quic_retries,omitempty"`
}

// Handler returns the admin endpoints. gatherer may be nil (no /metrics);
// GET /explain is served when src is also an Explainer.
func Handler(src StatusSource, gatherer prometheus.Gatherer, info Info) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		st := Status{Version: info.Version, Started: info.Started, Now: time.Now(), Status: src.Status()}
		if info.Config != nil {
			st.Config = info.Config()
		}
		st.Goroutines, st.OpenFiles = runtime.NumGoroutine(), openFiles()
		if info.Connections != nil {
			st.Connections = info.Connections()
		}
		if info.Transports != nil {
			st.Transports = info.Transports()
		}
		if info.Dnstap != nil {
			st.Dnstap.Sent, st.Dnstap.Dropped = info.Dnstap()
		}
		writeJSON(w, http.StatusOK, st)
	})
	if ex, ok := src.(Explainer); ok {
		mux.HandleFunc("GET /explain", func(w http.ResponseWriter, r *http.Request) {
			raw, v, err := ExplainQuery(r.URL.Query().Get("name"), r.URL.Query().Get("type"))
			switch {
			case err != nil:
				writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error(), "verdict": dnswire.Unreadable.String()})
				return
			case v.Verdict != dnswire.Accepted:
				// Refused as every front end refuses it: nothing to explain.
				writeJSON(w, http.StatusBadRequest, map[string]string{"error": v.Problem, "verdict": v.Verdict.String(),
					"rcode": dnswire.RcodeString(v.Rcode)})
				return
			}
			x, err := ex.Explain(raw)
			if err != nil {
				writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
				return
			}
			writeJSON(w, http.StatusOK, x)
		})
	}
	mux.HandleFunc("GET /{$}", servePage)
	mux.Handle("GET /page/", pageAssets)
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

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// ExplainQuery is the query GET /explain explains, RD set: its name and
// type read as the DoH JSON form reads them (dnswire.ParseQuestion), and
// the query gets the verdict a wire query gets at every front end
// (dnswire.CheckQuery): a meta type is refused here as it is there.
func ExplainQuery(name, qtype string) ([]byte, dnswire.QueryCheck, error) {
	var buf [dnswire.MaxNameLen]byte
	wire, _, t, err := dnswire.ParseQuestion(buf[:0], name, qtype)
	if err != nil {
		return nil, dnswire.QueryCheck{}, err
	}
	b := dnswire.NewBuilder(nil, dnswire.Header{Flags: dnswire.FlagRD})
	b.Question(wire, t, dnswire.ClassINET)
	raw, err := b.Finish()
	if err != nil {
		return nil, dnswire.QueryCheck{}, err
	}
	return raw, dnswire.CheckQuery(raw), nil
}

// openFiles counts this process's open descriptors, or -1.
func openFiles() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents) - 1 // less the directory ReadDir held open
}
