package metrics

import (
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/dohfwd/dohfwd/doh/internal/limits"
	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/telemetry"
)

// EngineStats is what the metrics read from the engine at scrape time.
type EngineStats interface {
	Counters() engine.Counters
	InFlight() int64
}

// Metrics are dohfwd's Prometheus metrics. The engine's own totals are
// read from its counters at scrape time, so /metrics and /status agree;
// the rest are observed as they happen.
type Metrics struct {
	Registry *prometheus.Registry

	requests       *prometheus.CounterVec   // DoH requests by HTTP status and DNS rcode
	attemptLatency *prometheus.HistogramVec // upstream attempt RTT by server
	perServer      sync.Map                 // netip.AddrPort -> prometheus.Observer
	odohRequests   *prometheus.CounterVec   // ODoH requests by role
	odohFailures   *prometheus.CounterVec   // ODoH failures by role and reason

	// answered holds the series of status 200 by protocol (protoIndex)
	// and rcode (0–15), where nearly every request is counted, once
	// looked up: counting one then skips the label lookup (a hash of the
	// labels under a lock).
	answered [4][16]atomic.Value // prometheus.Counter
}

// NewMetrics registers the dohfwd_* metrics observed as they happen, plus
// the Go runtime and process collectors, in a new registry. CollectEngine
// adds the engine's totals.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dohfwd_doh_requests_total",
			Help: "DoH requests answered, by HTTP version (proto: h2, h3, http/1.1), HTTP status and DNS rcode (\"\" when no DNS message was answered).",
		}, []string{"proto", "status", "rcode"}),
		attemptLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "dohfwd_upstream_attempt_duration_seconds",
			Help:    "Round-trip time of upstream attempts, by server, whatever their outcome.",
			Buckets: telemetry.LatencyBuckets,
		}, []string{"server"}),
		odohRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dohfwd_odoh_requests_total",
			Help: "Oblivious DoH requests, by role (target: queries this server opened; relay: messages it was asked to forward).",
		}, []string{"role"}),
		odohFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dohfwd_odoh_failures_total",
			Help: "Oblivious DoH requests that failed, by role and reason (malformed, message_type, unknown_key, decrypt, padding, seal; relay_forbidden, relay_bad_gateway).",
		}, []string{"role", "reason"}),
	}
	m.Registry.MustRegister(m.requests, m.attemptLatency, m.odohRequests, m.odohFailures,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// CollectEngine exports stats' counters and in-flight gauge, read at
// scrape time. Call it once, when the engine exists.
func (m *Metrics) CollectEngine(stats EngineStats) {
	m.Registry.MustRegister(engineCollector{stats})
}

// CollectAttemptLatency exports the attempt latencies read from src at
// scrape time instead of those observed here: an edge host's attempts are
// made, and tallied, inside its module instances. Call it once, before
// any attempt is observed here.
func (m *Metrics) CollectAttemptLatency(src func() map[string]telemetry.Histogram) {
	m.Registry.Unregister(m.attemptLatency)
	m.Registry.MustRegister(latencyCollector{src})
}

// ObserveAttempt counts one attempt's round-trip time.
func (m *Metrics) ObserveAttempt(ev engine.AttemptEvent) {
	o, ok := m.perServer.Load(ev.Server)
	if !ok {
		o, _ = m.perServer.LoadOrStore(ev.Server, m.attemptLatency.WithLabelValues(ev.Server.String()))
	}
	o.(prometheus.Observer).Observe(ev.RTT.Seconds())
}

// ObserveRequest counts one DoH request that came by proto (its ALPN
// name: h2, h3, http/1.1). rcode < 0 means the answer held no DNS message
// (a 4xx, or an error page).
func (m *Metrics) ObserveRequest(proto string, status, rcode int) {
	p := protoIndex(proto)
	if status != 200 || rcode < 0 || rcode >= len(m.answered[p]) {
		m.requests.WithLabelValues(proto, statusLabel(status), rcodeLabel(rcode)).Inc()
		return
	}
	c, ok := m.answered[p][rcode].Load().(prometheus.Counter)
	if !ok || p == 0 {
		c = m.requests.WithLabelValues(proto, statusLabel(status), rcodeLabel(rcode))
		m.answered[p][rcode].Store(c)
	}
	c.Inc()
}

// ObserveOblivious counts one ODoH request of the target or (relayed)
// the relay, and its failure's reason unless failure is "".
func (m *Metrics) ObserveOblivious(relayed bool, failure string) {
	role := "target"
	if relayed {
		role = "relay"
	}
	m.odohRequests.WithLabelValues(role).Inc()
	if failure != "" {
		m.odohFailures.WithLabelValues(role, failure).Inc()
	}
}

// protoIndex is proto's row of Metrics.answered; 0 (not kept) for
// another.
func protoIndex(proto string) int {
	switch proto {
	case "h2":
		return 1
	case "h3":
		return 2
	case "http/1.1":
		return 3
	}
	return 0
}

// ForgetServers drops the latency series of servers no longer configured.
func (m *Metrics) ForgetServers(keep func(netip.AddrPort) bool) {
	m.perServer.Range(func(k, _ any) bool {
		if ap := k.(netip.AddrPort); !keep(ap) {
			m.perServer.Delete(ap)
			m.attemptLatency.DeleteLabelValues(ap.String())
		}
		return true
	})
}

var statusLabels = func() map[int]string {
	m := map[int]string{}
	for _, c := range []int{200, 400, 404, 405, 413, 415, 500, 502, 503, 504} {
		m[c] = strconv.Itoa(c)
	}
	return m
}()

func statusLabel(code int) string {
	if s, ok := statusLabels[code]; ok {
		return s
	}
	return strconv.Itoa(code)
}

func rcodeLabel(rc int) string {
	if rc < 0 {
		return ""
	}
	if s, ok := dns.RcodeToString[rc]; ok {
		return s
	}
	return strconv.Itoa(rc)
}

// engineCollector exports the engine's counters as they are at scrape time.
type engineCollector struct{ stats EngineStats }

var (
	descUpstreamFailed = prometheus.NewDesc("dohfwd_upstream_failed_total", "Upstream attempts charged to a server (resolvd's upstream_failed).", nil, nil)
	descRefused        = prometheus.NewDesc("dohfwd_refused_total", "Questions refused by the in-flight ceiling.", nil, nil)
	descCancelled      = prometheus.NewDesc("dohfwd_cancelled_total", "Transactions ended by the client's or the question's budget, not charged to a server.", nil, nil)
	descMismatched     = prometheus.NewDesc("dohfwd_mismatched_replies_total", "Replies ignored because they did not match their transaction, or did not parse.", nil, nil)
	descCacheHits      = prometheus.NewDesc("dohfwd_cache_hits_total", "Questions answered from the cache.", nil, nil)
	descAttempts       = prometheus.NewDesc("dohfwd_attempts_total", "Upstream attempts by outcome.", []string{"outcome"}, nil)
	descQuestions      = prometheus.NewDesc("dohfwd_questions_total", "Questions by result.", []string{"result"}, nil)
	descInFlight       = prometheus.NewDesc("dohfwd_in_flight", "Upstream transactions outstanding.", nil, nil)
	descProbes         = prometheus.NewDesc("dohfwd_probes_total", "Background probes of demoted servers by outcome (engine.probe).", []string{"outcome"}, nil)
	descStale          = prometheus.NewDesc("dohfwd_stale_answers_total", "Questions answered from an expired cache entry (serve-stale, RFC 8767), by the reason the question was unavailable.", []string{"reason"}, nil)
	descPrefetches     = prometheus.NewDesc("dohfwd_prefetches_total", "Background refreshes of popular cache entries started (cache.prefetch_min_hits).", nil, nil)
	descPrefetchResult = prometheus.NewDesc("dohfwd_prefetch_results_total", "Background refreshes of cache entries ended, by result.", []string{"result"}, nil)
)

func (engineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descUpstreamFailed, descRefused, descCancelled, descMismatched,
		descCacheHits, descAttempts, descQuestions, descInFlight, descProbes, descStale, descPrefetches,
		descPrefetchResult} {
		ch <- d
	}
}

func (c engineCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats.Counters()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	counter(descUpstreamFailed, s.UpstreamFailed)
	counter(descRefused, s.Refused)
	counter(descCancelled, s.Cancelled)
	counter(descMismatched, s.MismatchedReplies)
	counter(descCacheHits, s.CacheHits)
	for o, v := range s.Attempts {
		counter(descAttempts, v, o)
	}
	for r, v := range s.Questions {
		counter(descQuestions, v, r)
	}
	for o, v := range s.Probes {
		counter(descProbes, v, o)
	}
	for r, v := range s.Stale {
		counter(descStale, v, r)
	}
	counter(descPrefetches, s.Prefetches)
	for r, v := range s.PrefetchResults {
		counter(descPrefetchResult, v, r)
	}
	ch <- prometheus.MustNewConstMetric(descInFlight, prometheus.GaugeValue, float64(c.stats.InFlight()))
}

// latencyCollector exports tallied attempt latencies (CollectAttemptLatency).
type latencyCollector struct {
	src func() map[string]telemetry.Histogram
}

var descAttemptLatency = prometheus.NewDesc("dohfwd_upstream_attempt_duration_seconds",
	"Round-trip time of upstream attempts, by server, whatever their outcome.", []string{"server"}, nil)

func (latencyCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descAttemptLatency }

func (c latencyCollector) Collect(ch chan<- prometheus.Metric) {
	for server, h := range c.src() {
		buckets := make(map[float64]uint64, len(telemetry.LatencyBuckets))
		var n uint64
		for i, c := range h.Counts {
			n += c
			if i < len(telemetry.LatencyBuckets) {
				buckets[telemetry.LatencyBuckets[i]] = n
			}
		}
		ch <- prometheus.MustNewConstHistogram(descAttemptLatency, n, h.Sum, buckets, server)
	}
}

// CollectLimits exports the per-client limits' refusals, the open
// connections and the size of the per-prefix table at scrape time.
func (m *Metrics) CollectLimits(l *limits.Limiter) {
	m.Registry.MustRegister(limitsCollector{l})
}

type limitsCollector struct{ l *limits.Limiter }

var (
	descLimitRefusals = prometheus.NewDesc("dohfwd_limit_refusals_total",
		"Queries or connections refused by a per-client or total limit (limits.*), by limit.", []string{"limit"}, nil)
	descConnections   = prometheus.NewDesc("dohfwd_connections_open", "Client connections open on the DoH, DoT and DNS/TCP listeners.", nil, nil)
	descLimitPrefixes = prometheus.NewDesc("dohfwd_limit_prefixes", "Client prefixes the limits keep state for (bounded).", nil, nil)
)

func (limitsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descLimitRefusals
	ch <- descConnections
	ch <- descLimitPrefixes
}

func (c limitsCollector) Collect(ch chan<- prometheus.Metric) {
	for i, v := range c.l.Refused() {
		ch <- prometheus.MustNewConstMetric(descLimitRefusals, prometheus.CounterValue, float64(v), limits.Limit(i).String())
	}
	ch <- prometheus.MustNewConstMetric(descConnections, prometheus.GaugeValue, float64(c.l.Connections()))
	ch <- prometheus.MustNewConstMetric(descLimitPrefixes, prometheus.GaugeValue, float64(c.l.Prefixes()))
}

// CollectTransports exports the listeners' counters by transport, read
// from each at scrape time: a DNS listener's questions (dot, doq, dns) and
// a QUIC listener's Retries (doq, h3); nil is a counter the transport does
// not have.
func (m *Metrics) CollectTransports(each func(yield func(transport string, questions, quicRetries *uint64))) {
	m.Registry.MustRegister(transportsCollector{each})
}

type transportsCollector struct {
	each func(yield func(transport string, questions, quicRetries *uint64))
}

var (
	descTransportQuestions = prometheus.NewDesc("dohfwd_dns_questions_total",
		"Questions the DNS listeners put to the engine (or refused for the client's limits), by transport (dot, doq, dns).", []string{"transport"}, nil)
	descQUICRetries = prometheus.NewDesc("dohfwd_quic_retries_total",
		"New QUIC connections asked to validate their address with a Retry, by transport (doq, h3).", []string{"transport"}, nil)
)

func (transportsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descTransportQuestions
	ch <- descQUICRetries
}

func (c transportsCollector) Collect(ch chan<- prometheus.Metric) {
	c.each(func(transport string, questions, quicRetries *uint64) {
		if questions != nil {
			ch <- prometheus.MustNewConstMetric(descTransportQuestions, prometheus.CounterValue, float64(*questions), transport)
		}
		if quicRetries != nil {
			ch <- prometheus.MustNewConstMetric(descQUICRetries, prometheus.CounterValue, float64(*quicRetries), transport)
		}
	})
}

// CollectDnstap exports the dnstap messages written and dropped, read from
// counts at scrape time (zeros while dnstap is off).
func (m *Metrics) CollectDnstap(counts func() (sent, dropped uint64)) {
	m.Registry.MustRegister(dnstapCollector{counts})
}

type dnstapCollector struct{ counts func() (sent, dropped uint64) }

var descDnstap = prometheus.NewDesc("dohfwd_dnstap_messages_total",
	"dnstap messages written to the collector (sent) and dropped: the queue was full, as while the collector is away, or a write failed.", []string{"result"}, nil)

func (dnstapCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descDnstap }

func (c dnstapCollector) Collect(ch chan<- prometheus.Metric) {
	sent, dropped := c.counts()
	ch <- prometheus.MustNewConstMetric(descDnstap, prometheus.CounterValue, float64(sent), "sent")
	ch <- prometheus.MustNewConstMetric(descDnstap, prometheus.CounterValue, float64(dropped), "dropped")
}

// CollectUpstreamConnections exports each encrypted server's connections
// (engine.ServerStatus.Connections), read from status at scrape time: the
// open ones, and the handshakes, resumed sessions, queries on reused
// connections and failed connects since the start, by server and
// transport. A server listed by several scopes is exported once.
func (m *Metrics) CollectUpstreamConnections(status func() engine.Status) {
	m.Registry.MustRegister(connCollector{status})
}

type connCollector struct{ status func() engine.Status }

var (
	descConnOpen       = prometheus.NewDesc("dohfwd_upstream_connections", "Connections open to an encrypted upstream (DoT, DoH).", []string{"server", "transport"}, nil)
	descConnHandshakes = prometheus.NewDesc("dohfwd_upstream_handshakes_total", "TLS handshakes made with an encrypted upstream: each a connection opened.", []string{"server", "transport"}, nil)
	descConnResumed    = prometheus.NewDesc("dohfwd_upstream_resumed_total", "Of the handshakes, those that resumed a TLS session.", []string{"server", "transport"}, nil)
	descConnReused     = prometheus.NewDesc("dohfwd_upstream_reused_total", "Queries sent to an encrypted upstream on a connection already open.", []string{"server", "transport"}, nil)
	descConnFailed     = prometheus.NewDesc("dohfwd_upstream_connect_failures_total", "Connects or TLS handshakes to an encrypted upstream that failed.", []string{"server", "transport"}, nil)
)

func (connCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descConnOpen, descConnHandshakes, descConnResumed, descConnReused, descConnFailed} {
		ch <- d
	}
}

func (c connCollector) Collect(ch chan<- prometheus.Metric) {
	seen := map[string]bool{}
	for _, sc := range c.status().Scopes {
		for _, sv := range sc.Servers {
			cs := sv.Connections
			if cs == nil || seen[sv.Address] {
				continue
			}
			seen[sv.Address] = true
			ch <- prometheus.MustNewConstMetric(descConnOpen, prometheus.GaugeValue, float64(cs.Open), sv.Address, sv.Transport)
			for _, x := range []struct {
				d *prometheus.Desc
				v uint64
			}{{descConnHandshakes, cs.Handshakes}, {descConnResumed, cs.Resumed}, {descConnReused, cs.Reused}, {descConnFailed, cs.Failed}} {
				ch <- prometheus.MustNewConstMetric(x.d, prometheus.CounterValue, float64(x.v), sv.Address, sv.Transport)
			}
		}
	}
}
