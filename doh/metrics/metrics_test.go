package metrics_test

import (
	"strings"
	"testing"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/dohfwd/dohfwd/doh/metrics"
	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/telemetry"
)

var sampleAttempt = engine.AttemptEvent{Question: 7, QName: "www.example.", QType: dns.TypeA, Scope: "main",
	Attempt: 1, Transport: engine.UDP, Outcome: engine.OutcomeAnswer, Rcode: 0}

type fakeStats struct{}

func (fakeStats) Counters() engine.Counters {
	return engine.Counters{UpstreamFailed: 4, Refused: 2, Cancelled: 1, MismatchedReplies: 3,
		Attempts: map[string]uint64{"answer": 10, "timeout": 4}, Questions: map[string]uint64{"answer": 9, "stale": 2},
		Stale: map[string]uint64{"attempts spent": 2}, Prefetches: 6, PrefetchResults: map[string]uint64{"answer": 5, "unavailable": 1}}
}
func (fakeStats) InFlight() int64 { return 5 }

func TestMetricsNamesAndValues(t *testing.T) {
	m := metrics.NewMetrics()
	m.CollectEngine(fakeStats{})
	telemetry.NewObserver(zerolog.Nop(), m).Attempt(sampleAttempt)
	for range 3 { // the second and later through the series kept for 200
		m.ObserveRequest("h2", 200, dns.RcodeNameError)
	}
	m.ObserveRequest("h3", 200, dns.RcodeServerFailure)
	m.ObserveRequest("http/1.1", 400, -1)
	for _, name := range []string{"dohfwd_upstream_failed_total", "dohfwd_refused_total",
		"dohfwd_cancelled_total", "dohfwd_mismatched_replies_total", "dohfwd_in_flight", "dohfwd_cache_hits_total"} {
		got, err := testutil.GatherAndCount(m.Registry, name)
		if err != nil || got != 1 {
			t.Errorf("%s: %d series, %v", name, got, err)
		}
	}
	exp := `
# HELP dohfwd_doh_requests_total DoH requests answered, by HTTP version (proto: h2, h3, http/1.1), HTTP status and DNS rcode ("" when no DNS message was answered).
# TYPE dohfwd_doh_requests_total counter
dohfwd_doh_requests_total{proto="http/1.1",rcode="",status="400"} 1
dohfwd_doh_requests_total{proto="h2",rcode="NXDOMAIN",status="200"} 3
dohfwd_doh_requests_total{proto="h3",rcode="SERVFAIL",status="200"} 1
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(exp), "dohfwd_doh_requests_total"); err != nil {
		t.Error(err)
	}
	exp = `
# HELP dohfwd_upstream_failed_total Upstream attempts charged to a server (resolvd's upstream_failed).
# TYPE dohfwd_upstream_failed_total counter
dohfwd_upstream_failed_total 4
# HELP dohfwd_in_flight Upstream transactions outstanding.
# TYPE dohfwd_in_flight gauge
dohfwd_in_flight 5
# HELP dohfwd_attempts_total Upstream attempts by outcome.
# TYPE dohfwd_attempts_total counter
dohfwd_attempts_total{outcome="answer"} 10
dohfwd_attempts_total{outcome="timeout"} 4
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(exp), "dohfwd_upstream_failed_total", "dohfwd_attempts_total", "dohfwd_in_flight"); err != nil {
		t.Error(err)
	}
	exp = `
# HELP dohfwd_stale_answers_total Questions answered from an expired cache entry (serve-stale, RFC 8767), by the reason the question was unavailable.
# TYPE dohfwd_stale_answers_total counter
dohfwd_stale_answers_total{reason="attempts spent"} 2
# HELP dohfwd_prefetches_total Background refreshes of popular cache entries started (cache.prefetch_min_hits).
# TYPE dohfwd_prefetches_total counter
dohfwd_prefetches_total 6
# HELP dohfwd_prefetch_results_total Background refreshes of cache entries ended, by result.
# TYPE dohfwd_prefetch_results_total counter
dohfwd_prefetch_results_total{result="answer"} 5
dohfwd_prefetch_results_total{result="unavailable"} 1
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(exp), "dohfwd_stale_answers_total", "dohfwd_prefetches_total", "dohfwd_prefetch_results_total"); err != nil {
		t.Error(err)
	}
	if n, _ := testutil.GatherAndCount(m.Registry, "dohfwd_upstream_attempt_duration_seconds"); n != 1 {
		t.Errorf("latency series: %d", n)
	}
}
