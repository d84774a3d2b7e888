package main

import (
	"context"
	"fmt"
	"io"
	stdlog "log"
	"net/netip"

	"github.com/dohfwd/dohfwd/config"
	"github.com/dohfwd/dohfwd/doh"
	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/metrics"
	"github.com/dohfwd/dohfwd/server"
	"github.com/dohfwd/dohfwd/telemetry"
)

func serveCommand(ctx context.Context, args []string, stderr io.Writer) int {
	fs := newFlags("serve", stderr)
	path := fs.String("config", "", "configuration `FILE` (default: the embedded default)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "dohfwd serve: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	cfg, err := loadConfig(*path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if err := serve(ctx, cfg, stderr); err != nil {
		fmt.Fprintln(stderr, "dohfwd:", err)
		return 1
	}
	return 0
}

func loadConfig(path string) (*config.Config, error) {
	if path == "" {
		return config.Default()
	}
	return config.Load(path)
}

// serve wires the engine, the DoH handler, telemetry and the listeners.
func serve(ctx context.Context, cfg *config.Config, logTo io.Writer) error {
	log, err := telemetry.NewLogger(logTo, cfg.Log.Format, cfg.Log.Level)
	if err != nil {
		return err
	}
	// Lines from Go's log package (certmagic, net/http) join the stream.
	stdlog.SetFlags(0)
	stdlog.SetOutput(telemetry.LineWriter(log))
	met := metrics.NewMetrics()
	eng, err := engine.New(cfg.EngineConfig(), engine.Options{
		Network:  engine.NativeNetwork{},
		Observer: telemetry.NewObserver(log, met),
	})
	if err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	met.CollectEngine(eng)

	trusted := make([]netip.Prefix, 0, len(cfg.Listen.TrustedProxies))
	for _, p := range cfg.Listen.TrustedProxies {
		pfx, err := config.ParsePrefix(p)
		if err != nil {
			return err // validated at load
		}
		trusted = append(trusted, pfx)
	}
	handler := doh.NewHandler(eng, doh.Options{
		Path:           cfg.Listen.Path,
		TrustedProxies: trusted,
		ServerTiming:   cfg.Listen.ServerTiming,
		TraceContext:   cfg.Listen.TraceContext,
		Observe: func(x doh.Exchange) {
			met.ObserveRequest(x.Status, x.Rcode)
			if x.Problem != "" {
				log.Debug().Int("status", x.Status).Int("rcode", x.Rcode).Str("problem", x.Problem).
					Str("client", x.ClientIP.String()).Str("method", x.Method).Msg("bad request")
			}
		},
	})
	return server.Run(ctx, server.Options{
		Config:  cfg,
		Handler: handler,
		Backend: eng,
		Metrics: met,
		Log:     log,
		Version: versionString(),
	})
}

func checkConfigCommand(args []string, stdout, stderr io.Writer) int {
	if len(args) > 1 {
		fmt.Fprintln(stderr, "usage: dohfwd check-config [FILE]")
		return 2
	}
	path := ""
	if len(args) == 1 {
		path = args[0]
	}
	cfg, err := loadConfig(path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	// The engine checks what the file cannot say alone.
	if _, err := engine.New(cfg.EngineConfig(), engine.Options{Network: engine.NativeNetwork{}}); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cfg.Source, err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: ok (%d scopes, %d fallback servers, %d hosts)\n",
		cfg.Source, len(cfg.Scopes), len(cfg.FallbackServers), len(cfg.Hosts))
	return 0
}
