// Package assembly builds a running dohfwd from a loaded configuration:
// the engine and its options, the DoH handler and its options, the log and
// metrics observers, the trusted proxies and (natively) the certificate
// settings and the listeners. `dohfwd serve`, `dohfwd-edge` (the wazero
// host) and the WebAssembly module all build through it; what differs
// between them (where the engine's sockets come from, whether there is an
// engine in this process at all, whether Prometheus is there) is a field
// of Options, not a copy of the wiring.
//
// This file builds for every target; serve.go, which adds the listeners,
// the certificates and Prometheus, only natively, so the module links
// none of them.
package assembly

import (
	"errors"
	"fmt"
	"io"
	"net/netip"

	"github.com/rs/zerolog"

	"github.com/dohfwd/dohfwd/doh"
	"github.com/dohfwd/dohfwd/doh/config"
	"github.com/dohfwd/dohfwd/doh/internal/ddr"
	"github.com/dohfwd/dohfwd/doh/internal/limits"
	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/telemetry"
	"github.com/dohfwd/dohfwd/engine/wiretap"
)

// Metrics counts what the observers see. Package metrics implements it
// natively (Prometheus); the module has none.
type Metrics interface {
	telemetry.AttemptMetrics
	// ObserveRequest counts one DoH request that came by proto (h2, h3,
	// http/1.1); rcode < 0 when the answer held no DNS message.
	ObserveRequest(proto string, status, rcode int)
	// ForgetServers drops what is kept per server for servers a reload
	// removed.
	ForgetServers(keep func(netip.AddrPort) bool)
}

// Options are what differs between the ways dohfwd runs.
type Options struct {
	// LogTo receives the structured log.
	LogTo io.Writer
	// LogFormat, when set, overrides log.format: the module always
	// writes JSON, for its host to pass on.
	LogFormat string
	// Network is the engine's way to the network: engine.NativeNetwork
	// natively, the host's socket imports in the module. Nil builds no
	// engine here: the edge host, whose engines run in module instances.
	Network engine.Network
	// Resolver, used when Network is nil, is a resolver that lives
	// elsewhere (the edge host's pool of module instances, each holding
	// an engine): the DoH handler, the client limits and the setup pages
	// are built over it as over the engine, so the host's front end is
	// dohfwd serve's. The DDR names are the resolver's to answer.
	Resolver doh.Resolver
	// TCPOnly starts the engine without UDP (hosts without it).
	TCPOnly bool
	// Metrics, when set, counts requests and attempts; nil in the module.
	Metrics Metrics
	// BatchLog writes the log in batches (telemetry.BatchWriter), so the
	// per-attempt events cost little; Close flushes the last batch. Off
	// in the module, whose goroutines run only while its host calls it.
	BatchLog bool
	// Version is dohfwd's version, which dnstap messages carry.
	Version string
}

// Dohfwd is dohfwd assembled from one configuration.
type Dohfwd struct {
	Config *config.Config
	Log    zerolog.Logger
	// Engine is nil when Options.Network was.
	Engine *engine.Engine
	// Handler is the DoH handler over Resolver (or Options.Resolver);
	// nil with neither. Natively an http.Handler too; the module serves
	// through its ServeRequest, without net/http.
	Handler *doh.Handler
	// Resolver is the engine behind the DDR names (_dns.resolver.arpa),
	// which every listener answers locally; nil without an engine.
	Resolver *ddr.Resolver
	// TrustedProxies are listen.trusted_proxies, parsed.
	TrustedProxies []netip.Prefix
	// Limits enforces the limits section per client prefix; nil without
	// an engine or Options.Resolver. A SIGHUP reload reconfigures it
	// (Reloaded).
	Limits *limits.Limiter

	metrics Metrics
	batch   *telemetry.BatchWriter // nil unless Options.BatchLog
	// dnstap writes the client and upstream messages (dnstap.address);
	// nil when off, and in the module.
	dnstap dnstapWriter
	setup  setupPages // natively: the device setup pages; nil in the module
	// oblivious and relay are the ODoH roles the odoh section turns on
	// (natively only); nil when off.
	oblivious doh.ObliviousTarget
	relay     doh.ObliviousRelay
}

// setupPages serves the device setup page and the Apple profile (package
// setup, native only); it learns the listeners' ports with the DDR
// designation.
type setupPages interface {
	doh.SetupPages
	Designate(ddr.Designation)
}

// New assembles dohfwd for cfg.
func New(cfg *config.Config, o Options) (*Dohfwd, error) {
	format := cfg.Log.Format
	if o.LogFormat != "" {
		format = o.LogFormat
	}
	var (
		log   zerolog.Logger
		batch *telemetry.BatchWriter
		err   error
	)
	if o.BatchLog {
		log, batch, err = telemetry.NewBatchedLogger(o.LogTo, format, cfg.Log.Level)
	} else {
		log, err = telemetry.NewLogger(o.LogTo, format, cfg.Log.Level)
	}
	if err != nil {
		return nil, fmt.Errorf("log: %w", err)
	}
	trusted, err := trustedProxies(cfg)
	if err != nil {
		return nil, err
	}
	d := &Dohfwd{Config: cfg, Log: log, TrustedProxies: trusted, metrics: o.Metrics, batch: batch}
	if o.Network == nil && o.Resolver == nil {
		return d, nil
	}
	if d.dnstap, err = newDnstap(cfg, log, o.Version); err != nil {
		return nil, err
	}
	if d.oblivious, d.relay, err = newOblivious(cfg, log); err != nil {
		d.Close()
		return nil, err
	}
	if o.Network == nil {
		d.Limits = limits.New(LimitsConfig(cfg), limits.Options{OnSummary: d.limitSummary})
		if d.setup, err = newSetupPages(cfg); err != nil {
			d.Close()
			return nil, err
		}
		d.Handler = doh.NewHandler(o.Resolver, d.handlerOptions())
		return d, nil
	}
	var attempts telemetry.AttemptMetrics
	if o.Metrics != nil {
		attempts = o.Metrics
	}
	d.Limits = limits.New(LimitsConfig(cfg), limits.Options{OnSummary: d.limitSummary})
	d.Engine, err = engine.New(cfg.EngineConfig(), engine.Options{
		Network:     o.Network,
		Observer:    telemetry.NewBatchedObserver(log, batch, attempts),
		TCPOnly:     o.TCPOnly,
		ClientLimit: d.Limits,
		Wiretap:     d.Wiretap(),
	})
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("engine: %w", err)
	}
	d.setup, err = newSetupPages(cfg)
	if err != nil {
		d.Close()
		return nil, err
	}
	d.Resolver = ddr.Wrap(d.Engine)
	d.Handler = doh.NewHandler(d.Resolver, d.handlerOptions())
	return d, nil
}

// handlerOptions are the DoH handler's options from the configuration,
// with the assembly's observer, limits and setup pages.
func (d *Dohfwd) handlerOptions() doh.Options {
	cfg := d.Config
	hopts := doh.Options{
		Path:           cfg.Listen.Path,
		TrustedProxies: d.TrustedProxies,
		ServerTiming:   cfg.Listen.ServerTiming,
		TraceContext:   cfg.Listen.TraceContext,
		Observe:        d.Observe,
		Admit:          d.Limits.Admit,
		Wiretap:        d.Wiretap(),
		Oblivious:      d.oblivious,
		Relay:          d.relay,
	}
	if d.setup != nil { // a nil *setup.Handler in the interface would not be nil
		hopts.Setup = d.setup
	}
	return hopts
}

// Close releases what New took: the engine's pooled sockets, then the
// last batch of the log, so no event of a drained question is lost.
func (d *Dohfwd) Close() {
	if d.Engine != nil {
		d.Engine.Close()
	}
	if d.dnstap != nil {
		d.dnstap.Close()
	}
	if d.batch != nil {
		d.batch.Close()
	}
}

// dnstapWriter is the dnstap writer (package dnstap) as the assembly
// uses it.
type dnstapWriter interface {
	wiretap.Tap
	Counters() (sent, dropped uint64)
	Close()
}

// Wiretap is what the front ends and the engine hand their messages to:
// the dnstap writer, or nil when dnstap is off.
func (d *Dohfwd) Wiretap() wiretap.Tap {
	if d.dnstap == nil {
		return nil
	}
	return d.dnstap
}

// DnstapCounters are the dnstap messages written and dropped (zero when
// dnstap is off), for /status and /metrics.
func (d *Dohfwd) DnstapCounters() (sent, dropped uint64) {
	if d.dnstap == nil {
		return 0, 0
	}
	return d.dnstap.Counters()
}

// Observe takes one DoH request at its end: it counts it and, at debug,
// logs why a request was bad. The edge host calls it for the requests its
// module instances answered.
func (d *Dohfwd) Observe(x doh.Exchange) {
	if d.metrics != nil {
		d.metrics.ObserveRequest(doh.ProtoALPN(x.Proto), x.Status, x.Rcode)
		if om, ok := d.metrics.(obliviousMetrics); ok && x.Format == doh.FormatOblivious {
			om.ObserveOblivious(x.Relayed, x.ODoHFailure)
		}
	}
	if x.Relayed {
		// The relay logs nothing that ties a client to a target message:
		// not even why a request of it was refused.
		return
	}
	// A client over its limits is summed up by limitSummary, not logged
	// once per refused query.
	if x.Problem != "" && x.Status != statusTooManyRequests {
		d.Log.Debug().Int("status", x.Status).Int("rcode", x.Rcode).Str("problem", x.Problem).
			Str("client", x.ClientIP.String()).Str("method", x.Method).Msg("bad request")
	}
}

// obliviousMetrics counts ODoH requests (package metrics): those of the
// target and of the relay, and failures by reason ("" for none).
type obliviousMetrics interface {
	ObserveOblivious(relayed bool, failure string)
}

// statusTooManyRequests is net/http's StatusTooManyRequests, which the
// module, linking no net/http, cannot name.
const statusTooManyRequests = 429

// Reloaded takes a reloaded configuration's parts outside the engine:
// the client limits.
func (d *Dohfwd) Reloaded(cfg *config.Config) {
	if d.Limits != nil {
		d.Limits.Reconfigure(LimitsConfig(cfg))
	}
}

// Reload applies a reloaded configuration to the engine assembled here and
// to what surrounds it, the steps a SIGHUP takes in dohfwd serve (package
// server's reload over Serve), in one call, for the module
// (dohfwd_reload): the engine takes its part or refuses it, and then
// nothing changes; else the metrics forget the servers it dropped
// (Reconfigured), the limits take theirs (Reloaded) and the log level is
// set.
func (d *Dohfwd) Reload(cfg *config.Config) error {
	if d.Engine == nil {
		return errors.New("assembly: reload: no engine was assembled here")
	}
	if _, err := telemetry.ParseLevel(cfg.Log.Level); err != nil { // checked at load; refused before anything changes
		return err
	}
	ec := cfg.EngineConfig()
	if err := d.Engine.Reconfigure(ec); err != nil {
		return err
	}
	d.Reconfigured(ec)
	d.Reloaded(cfg)
	return telemetry.SetLevel(cfg.Log.Level)
}

// LimitsConfig is the limits section of cfg.
func LimitsConfig(cfg *config.Config) limits.Config {
	l := cfg.Limits
	return limits.Config{
		ClientQPS: l.ClientQPS, ClientBurst: l.ClientBurst, ClientInFlight: l.ClientInFlight,
		ClientConnections: l.ClientConnections, Connections: l.Connections,
		PrefixV4: l.PrefixV4, PrefixV6: l.PrefixV6,
	}
}

// limitSummary logs what the client limits refused, at most once per
// period, in place of one line per refusal.
func (d *Dohfwd) limitSummary(s limits.Summary) {
	ev := d.Log.Warn().Dur("period_ms", s.Since)
	for i, n := range s.Refused {
		ev = ev.Uint64(limits.Limit(i).String(), n)
	}
	if s.Last.IsValid() {
		ev = ev.Str("last_prefix", s.Last.String())
	}
	ev.Msg("client limits refused")
}

// Reconfigured is told that the backend took a reloaded engine
// configuration: the metrics of the servers it no longer has go.
func (d *Dohfwd) Reconfigured(ec engine.Config) {
	if d.metrics == nil {
		return
	}
	keep := map[netip.AddrPort]bool{}
	add := func(servers []string) {
		for _, s := range servers {
			if ep, err := engine.ParseEndpoint(s); err == nil {
				keep[ep.Addr] = true
			}
		}
	}
	for _, s := range ec.Scopes {
		add(s.Servers)
	}
	add(ec.FallbackServers)
	d.metrics.ForgetServers(func(ap netip.AddrPort) bool { return keep[ap] })
}

// trustedProxies parses listen.trusted_proxies (validated at load).
func trustedProxies(cfg *config.Config) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range cfg.Listen.TrustedProxies {
		p, err := config.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("listen.trusted_proxies: %w", err)
		}
		out = append(out, p)
	}
	return out, nil
}
