package admin

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dohfwd/dohfwd/engine"
)

type fixedStatus engine.Status

func (f fixedStatus) Status() engine.Status { return engine.Status(f) }

func TestEndpoints(t *testing.T) {
	until := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	src := fixedStatus{
		Scopes: []engine.ScopeStatus{{Name: "corp", Domains: []string{"corp.example."}, Servers: []engine.ServerStatus{
			{Address: "10.0.0.53:53"}, {Address: "10.0.0.54:53", Demoted: true, DemotedUntil: &until}}}},
		FallbackServers: []string{"1.1.1.1:53"},
		Counters:        engine.Counters{UpstreamFailed: 3, Refused: 1},
		InFlight:        2, InFlightCeiling: 4096,
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "dohfwd_test_total", Help: "x"}))
	srv := httptest.NewServer(Handler(src, reg, Info{Version: "v1.2.3", Config: func() string { return "/etc/dohfwd.yaml" }}))
	defer srv.Close()

	res, err := http.Get(srv.URL + "/status")
	if err != nil {
		t.Fatal(err)
	}
	var st map[string]any
	if err := json.NewDecoder(res.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if st["version"] != "v1.2.3" || st["config"] != "/etc/dohfwd.yaml" || st["in_flight"] != 2.0 {
		t.Fatalf("status: %v", st)
	}
	servers := st["scopes"].([]any)[0].(map[string]any)["servers"].([]any)
	if s := servers[1].(map[string]any); s["demoted"] != true || s["demoted_until"] != "2030-01-02T03:04:05Z" {
		t.Fatalf("demoted server: %v", s)
	}
	if s := servers[0].(map[string]any); s["demoted"] != false || s["demoted_until"] != nil {
		t.Fatalf("healthy server: %v", s)
	}
	if c := st["counters"].(map[string]any); c["upstream_failed"] != 3.0 || c["refused"] != 1.0 {
		t.Fatalf("counters: %v", c)
	}

	for path, want := range map[string]string{"/metrics": "dohfwd_test_total 0", "/healthz": "ok"} {
		res, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || !strings.Contains(string(b), want) {
			t.Errorf("%s: %d %q", path, res.StatusCode, b)
		}
	}
	res, _ = http.Post(srv.URL+"/status", "text/plain", nil)
	if res.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /status: %d", res.StatusCode)
	}
	res, _ = http.Get(srv.URL + "/nothing")
	if res.StatusCode != http.StatusNotFound {
		t.Errorf("GET /nothing: %d", res.StatusCode)
	}
}

// explainingStatus is a status source that also explains.
type explainingStatus struct {
	fixedStatus
	asked *dns.Msg
}

func (e *explainingStatus) Explain(query []byte) (engine.Explanation, error) {
	q := new(dns.Msg)
	if err := q.Unpack(query); err != nil {
		return engine.Explanation{}, err
	}
	e.asked = q
	return engine.Explanation{Name: q.Question[0].Name, Type: dns.Type(q.Question[0].Qtype).String(), Scope: "corp"}, nil
}

func TestExplainAndPage(t *testing.T) {
	src := &explainingStatus{}
	srv := httptest.NewServer(Handler(src, nil, Info{}))
	defer srv.Close()
	get := func(path string) (int, string, http.Header) {
		res, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		return res.StatusCode, string(b), res.Header
	}
	if code, body, _ := get("/explain?name=db.corp.example&type=aaaa"); code != 200 || !strings.Contains(body, `"scope": "corp"`) ||
		src.asked.Question[0].Name != "db.corp.example." || src.asked.Question[0].Qtype != dns.TypeAAAA {
		t.Fatalf("explain: %d %s", code, body)
	}
	for _, bad := range []string{"/explain", "/explain?name=a..b", "/explain?name=x&type=NOPE"} {
		if code, body, _ := get(bad); code != 400 || !strings.Contains(body, `"error"`) {
			t.Errorf("%s: %d %s", bad, code, body)
		}
	}
	code, body, h := get("/")
	if code != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/html") || !strings.Contains(body, `src="/page/status.js"`) {
		t.Fatalf("page: %d %s", code, h)
	}
	for _, asset := range []string{"/page/status.js", "/page/status.css"} {
		if code, body, _ := get(asset); code != 200 || len(body) < 100 {
			t.Errorf("%s: %d", asset, code)
		}
	}
	// The page uses nothing from outside the binary.
	if strings.Contains(body, "http://") || strings.Contains(body, "https://") {
		t.Error("the page refers to another origin")
	}
}
