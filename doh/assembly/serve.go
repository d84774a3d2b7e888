//go:build !wasip1

package assembly

import (
	"context"
	"errors"
	"fmt"
	stdlog "log"
	"net"
	"net/http"
	"os"
	"slices"

	"github.com/rs/zerolog"

	"github.com/dohfwd/dohfwd/doh"
	"github.com/dohfwd/dohfwd/doh/admin"
	"github.com/dohfwd/dohfwd/doh/config"
	"github.com/dohfwd/dohfwd/doh/internal/certs"
	"github.com/dohfwd/dohfwd/doh/internal/ddr"
	"github.com/dohfwd/dohfwd/doh/internal/proxied"
	"github.com/dohfwd/dohfwd/doh/metrics"
	"github.com/dohfwd/dohfwd/doh/server"
	"github.com/dohfwd/dohfwd/doh/setup"
	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/telemetry"
)

// Backend is what runs behind the listeners: the engine, or the edge
// host's pool of module instances, seen by the server (status, drain,
// reloads) and by the metrics (counters at scrape time).
// A reload reaches it as reloading hands it on.
type Backend interface {
	Status() engine.Status
	metrics.EngineStats
}

// wholeReloader is a Backend that takes a reload whole (the edge host's
// pool, whose instances apply it as Dohfwd.Reload does).
type wholeReloader interface {
	Reload(*config.Config) error
}

// engineReconfigurer is a Backend that takes the engine's part of a
// reload (the engine).
type engineReconfigurer interface {
	Reconfigure(engine.Config) error
}

// Serving is what runs behind the listeners.
type Serving struct {
	// Backend answers for the engine; nil means the assembled Engine.
	Backend Backend
	// Handler serves DoH; nil means the assembled Handler.
	Handler http.Handler
	Version string
	// Signals, when set, stands for the process's SIGHUP, SIGTERM and
	// SIGINT, and Load, when set, reads the configuration on SIGHUP in
	// place of Config.Source (server.Options): for tests.
	Signals <-chan os.Signal
	Load    func() (*config.Config, error)
}

// Serve runs the listeners (package server) around s until ctx ends or a
// SIGTERM. Lines from Go's log package (certmagic, net/http) join the log.
// A SIGHUP reload goes to the backend and then to Reconfigured.
func (d *Dohfwd) Serve(ctx context.Context, s Serving) error {
	stdlog.SetFlags(0)
	stdlog.SetOutput(telemetry.LineWriter(d.Log))
	if s.Backend == nil || s.Handler == nil {
		if d.Engine == nil {
			return errors.New("assembly: nothing to serve: no engine was assembled and Serving names no backend and handler")
		}
		if s.Backend == nil {
			s.Backend = d.Engine
		}
		if s.Handler == nil {
			s.Handler = d.Handler
		}
	}
	// The Prometheus metrics given to New are served at /metrics, with
	// the backend's counters read at scrape time.
	met, _ := d.metrics.(*metrics.Metrics)
	if met != nil {
		met.CollectEngine(s.Backend)
		met.CollectUpstreamConnections(s.Backend.Status)
		if d.Limits != nil {
			met.CollectLimits(d.Limits)
		}
		met.CollectDnstap(d.DnstapCounters)
	}
	if d.dnstap != nil {
		// After the drain: the last questions' messages go out.
		defer d.dnstap.Close()
	}
	var backend server.Backend = reloading{s.Backend, d}
	if ex, ok := s.Backend.(admin.Explainer); ok {
		// The admin listener serves GET /explain for a backend that
		// explains (the engine; not the edge host's pool).
		backend = explaining{reloading{s.Backend, d}, ex}
	}
	o := server.Options{
		Config:  d.Config,
		Handler: s.Handler,
		Backend: backend,
		Metrics: met,
		Certs:   CertsConfig(d.Config, d.Log),
		Log:     d.Log,
		Version: s.Version,
		Signals: s.Signals,
		Load:    s.Load,
		// A reload reaches the limits here, after the backend took it.
		Reloaded: d.Reloaded,
		// The DoH listeners' HTTP limits are read at start: a connection
		// keeps what it announced in its SETTINGS.
		Limits:  doh.Limits{MaxConcurrentStreams: uint32(d.Config.Limits.StreamsPerConnection)},
		Wiretap: d.Wiretap(),
		Dnstap:  d.DnstapCounters,
	}
	if d.Limits != nil {
		o.WrapClientListener = d.Limits.Listen
		o.Admit = d.Limits.Admit
		o.HoldConn = d.Limits.HoldConn
		o.Connections = d.Limits.Connections
	}
	if d.Resolver != nil {
		// The DoT and plain DNS listeners answer from the same resolver.
		o.Resolver = d.Resolver
	}
	if d.Resolver != nil || d.setup != nil {
		// Once the listeners are bound, DDR and the setup page learn
		// their ports (the edge host has setup pages, and its DDR names
		// are its module's).
		o.Designate = func(des ddr.Designation) {
			if d.Resolver != nil {
				d.Resolver.Designate(des)
			}
			if d.setup != nil {
				d.setup.Designate(des)
			}
		}
	}
	return server.Run(ctx, o)
}

func newSetupPages(cfg *config.Config) (setupPages, error) { return SetupPages(cfg) }

// SetupPages is the setup page and profile handler for cfg, signing the
// profile when apple_profile says so.
func SetupPages(cfg *config.Config) (*setup.Handler, error) {
	h := &setup.Handler{Path: cfg.Listen.Path}
	if cfg.AppleProfile.SignCert != "" {
		s, err := setup.LoadSigner(cfg.AppleProfile.SignCert, cfg.AppleProfile.SignKey)
		if err != nil {
			return nil, fmt.Errorf("apple_profile: %w", err)
		}
		h.Signer = s
	}
	return h, nil
}

// reloading is the backend as the server sees it (server.Backend): a
// reload goes to the backend, then, once it took it, to the assembly.
type reloading struct {
	Backend
	d *Dohfwd
}

// Reload hands cfg whole to a backend that takes it whole, its engine's
// part to the engine; on error nothing changed.
func (r reloading) Reload(cfg *config.Config) error {
	var err error
	switch b := r.Backend.(type) {
	case wholeReloader:
		err = b.Reload(cfg)
	case engineReconfigurer:
		err = b.Reconfigure(cfg.EngineConfig())
	default:
		err = fmt.Errorf("assembly: the backend %T takes no reload", r.Backend)
	}
	if err != nil {
		return err
	}
	r.d.Reconfigured(cfg.EngineConfig())
	return nil
}

// explaining is reloading for a backend that also explains questions,
// which the admin listener looks for.
type explaining struct {
	reloading
	admin.Explainer
}

// CertsConfig is the certificate manager's part of the configuration.
// TLS-ALPN-01 challenges are answered on the HTTPS listener; the HTTP-01
// listener takes PROXY protocol from the same balancers as the DoH ones.
func CertsConfig(c *config.Config, log zerolog.Logger) certs.Config {
	return certs.Config{
		Mode:     c.TLS.Mode,
		CertFile: c.TLS.CertFile,
		KeyFile:  c.TLS.KeyFile,
		ACME: certs.ACMEConfig{
			Domains: slices.Clone(c.TLS.ACME.Domains),
			Email:   c.TLS.ACME.Email,
			CA:      c.TLS.ACME.CA,
			CARoot:  c.TLS.ACME.CARoot,
			Storage: c.TLS.ACME.Storage,
			Redis: certs.RedisConfig{
				PasswordFile: c.TLS.ACME.Redis.PasswordFile,
				CARoot:       c.TLS.ACME.Redis.CARoot,
				KeyPrefix:    c.TLS.ACME.Redis.KeyPrefix,
				LockLease:    c.TLS.ACME.Redis.LockLease,
			},
			HTTPListen: c.TLS.ACME.HTTPListen,
			WrapHTTPListener: func(ln net.Listener) net.Listener {
				return proxied.Listen(ln, server.ProxyOptions(c, log))
			},
			DisableTLSALPN: c.TLS.ACME.DisableTLSALPN,
			Profile:        c.TLS.ACME.Profile,
			TLSALPNListen:  c.Listen.HTTPS,
		},
	}
}
