package metrics_test

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/miekg/dns"
	"github.com/rs/zerolog"

	"github.com/dohfwd/dohfwd/doh/metrics"
	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/telemetry"
)

// dashboardFile is the Grafana dashboard deploy/ ships.
const dashboardFile = "../../deploy/grafana/dohfwd-dashboard.json"

// exported returns every series name dohfwd's /metrics serves (a
// histogram's _bucket, _sum and _count included) with the labels each
// carries, from metrics wired as the server wires them: a real engine's
// counters, the observer and the request counter.
func exported(t *testing.T) map[string][]string {
	m := metrics.NewMetrics()
	e, err := engine.New(engine.Config{}, engine.Options{Network: engine.NativeNetwork{}})
	if err != nil {
		t.Fatal(err)
	}
	m.CollectEngine(e)
	telemetry.NewObserver(zerolog.Nop(), m).Attempt(sampleAttempt)
	m.ObserveRequest("h2", 200, dns.RcodeSuccess)
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, f := range families {
		var labels []string
		for _, mt := range f.GetMetric() {
			for _, l := range mt.GetLabel() {
				labels = append(labels, l.GetName())
			}
		}
		names := []string{f.GetName()}
		if f.GetType().String() == "HISTOGRAM" {
			names = []string{f.GetName() + "_bucket", f.GetName() + "_sum", f.GetName() + "_count"}
		}
		for _, n := range names {
			out[n] = labels
			if strings.HasSuffix(n, "_bucket") {
				out[n] = append(labels, "le")
			}
		}
	}
	return out
}

var (
	promMatcher  = regexp.MustCompile(`([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"`)
	promBraces   = regexp.MustCompile(`\{[^}]*\}`)
	promRange    = regexp.MustCompile(`\[[^\]]*\]`)
	promGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	promToken    = regexp.MustCompile(`\d[\w.]*|[a-zA-Z_:][\w:]*\s*\(?`)
)

// promKeywords are PromQL words that are not metric names.
var promKeywords = []string{"and", "or", "unless", "bool", "offset", "inf", "nan"}

// metricsIn returns the metric names and the label names a PromQL
// expression uses. It reads the subset of PromQL dashboards are written
// in: selectors with matchers, ranges, functions, aggregations with by().
func metricsIn(expr string) (names, labels []string) {
	for _, b := range promBraces.FindAllString(expr, -1) {
		for _, m := range promMatcher.FindAllStringSubmatch(b, -1) {
			labels = append(labels, m[1])
		}
	}
	expr = promBraces.ReplaceAllString(expr, " ")
	expr = promRange.ReplaceAllString(expr, " ")
	for _, m := range promGrouping.FindAllStringSubmatch(expr, -1) {
		for _, l := range strings.Split(m[1], ",") {
			if l = strings.TrimSpace(l); l != "" {
				labels = append(labels, l)
			}
		}
	}
	expr = promGrouping.ReplaceAllString(expr, " ")
	for _, tok := range promToken.FindAllString(expr, -1) {
		if tok[0] >= '0' && tok[0] <= '9' || strings.HasSuffix(tok, "(") || slices.Contains(promKeywords, strings.ToLower(tok)) {
			continue // a number, a function or aggregation, an operator word
		}
		names = append(names, strings.TrimSpace(tok))
	}
	return names, labels
}

// Every expression of the shipped Grafana dashboard names at least one
// metric, every metric it names is one dohfwd exports, and every label it
// groups or filters by is one those metrics carry (or job and instance,
// which Prometheus adds).
func TestGrafanaDashboardNamesExportedMetrics(t *testing.T) {
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	have := exported(t)
	exprs := 0
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs++
			names, labels := metricsIn(tg.Expr)
			if len(names) == 0 {
				t.Errorf("panel %q: %q names no metric", p.Title, tg.Expr)
			}
			known := []string{"job", "instance"}
			for _, n := range names {
				l, ok := have[n]
				if !ok {
					t.Errorf("panel %q: %q names %s, which dohfwd does not export", p.Title, tg.Expr, n)
				}
				known = append(known, l...)
			}
			for _, l := range labels {
				if !slices.Contains(known, l) {
					t.Errorf("panel %q: %q uses label %q, which %v do not carry", p.Title, tg.Expr, l, names)
				}
			}
		}
	}
	if exprs < 10 {
		t.Fatalf("only %d expressions in %s", exprs, dashboardFile)
	}
}

// The check itself catches a misspelt metric and a label no metric has.
func TestDashboardCheckCatchesUnknownNames(t *testing.T) {
	names, labels := metricsIn(`histogram_quantile(0.9, sum by (le, server) (rate(dohfwd_upstream_attempt_duration_seconds_bucket{job=~"$job"}[5m]))) / clamp_min(dohfwd_in_flght, 1e-9)`)
	if !slices.Equal(names, []string{"dohfwd_upstream_attempt_duration_seconds_bucket", "dohfwd_in_flght"}) {
		t.Fatalf("names %v", names)
	}
	if !slices.Equal(labels, []string{"job", "le", "server"}) {
		t.Fatalf("labels %v", labels)
	}
	if _, ok := exported(t)["dohfwd_in_flght"]; ok {
		t.Fatal("a misspelt metric counts as exported")
	}
}
