package host

import (
	"encoding/base64"
	"io"
	"strings"
	"testing"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dohfwd/dohfwd/doh/assembly"
	"github.com/dohfwd/dohfwd/doh/config"
	"github.com/dohfwd/dohfwd/doh/metrics"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
)

// dohfwd-edge counts DoH requests as dohfwd serve does: by HTTP status and
// by the rcode of the answer (wire or JSON), with "" for requests that got
// no DNS message; and it exports the attempt latencies its module
// instances tallied. Both ways of serving count alike: the host's native
// front end handing the module questions (dohfwd-edge), and whole
// requests answered by the module's own DoH handler (Handler, the
// Workers glue's way), whose answers the host reads back (rcodeOf).
func TestWazeroRequestsAndLatencyCounted(t *testing.T) {
	t.Parallel()
	for _, whole := range []bool{false, true} {
		name := "native front"
		if whole {
			name = "whole requests"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			requestsAndLatencyCounted(t, whole)
		})
	}
}

func requestsAndLatencyCounted(t *testing.T, whole bool) {
	s := upstreamtest.Start(t, upstreamtest.Rcode(dns.RcodeNameError))
	yaml := edgeConfig(s)
	met := metrics.NewMetrics()
	o := assembly.Options{LogTo: io.Discard, Metrics: met}
	var e *edge
	if whole {
		// The module's handler observes nothing the host sees: the
		// host's Handler tells the assembly's observer.
		cfg, err := config.Parse("edge.yaml", yaml)
		if err != nil {
			t.Fatal(err)
		}
		d, err := assembly.New(cfg, o)
		if err != nil {
			t.Fatal(err)
		}
		e = startEdgeWith(t, yaml, 1, assembly.Options{LogTo: io.Discard}, &Handler{Observe: d.Observe})
	} else {
		e = startEdgeWith(t, yaml, 1, o, nil)
	}
	met.CollectAttemptLatency(e.pool.AttemptLatency)

	wire, _ := query("gone.example.org", dns.TypeA).Pack()
	for _, target := range []string{
		"/dns-query?dns=" + base64.RawURLEncoding.EncodeToString(wire),
		"/resolve?name=gone.example.org&type=A",
		"/dns-query?dns=%%%",
	} {
		resp, err := e.client.Get(e.url + target)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	want := `
# HELP dohfwd_doh_requests_total DoH requests answered, by HTTP version (proto: h2, h3, http/1.1), HTTP status and DNS rcode ("" when no DNS message was answered).
# TYPE dohfwd_doh_requests_total counter
dohfwd_doh_requests_total{proto="h2",rcode="",status="400"} 1
dohfwd_doh_requests_total{proto="h2",rcode="NXDOMAIN",status="200"} 2
`
	if err := testutil.GatherAndCompare(met.Registry, strings.NewReader(want), "dohfwd_doh_requests_total"); err != nil {
		t.Error(err)
	}

	families, err := met.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var samples uint64
	for _, f := range families {
		if f.GetName() != "dohfwd_upstream_attempt_duration_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			if m.GetLabel()[0].GetValue() != s.String() {
				t.Errorf("latency of server %q, want %q", m.GetLabel()[0].GetValue(), s)
			}
			samples += m.GetHistogram().GetSampleCount()
		}
	}
	if samples != 2 {
		t.Errorf("%d attempt latencies exported, want 2 (one per question)", samples)
	}
}
