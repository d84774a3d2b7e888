package main

import (
	"context"
	"fmt"
	"io"

	"github.com/dohfwd/dohfwd/cmd/internal/procs"
	"github.com/dohfwd/dohfwd/doh/assembly"
	"github.com/dohfwd/dohfwd/doh/config"
	"github.com/dohfwd/dohfwd/doh/metrics"
	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/dohclient"
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
	cfg, err := config.LoadOrDefault(*path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	procs.SetServing()
	if err := serve(ctx, cfg, stderr); err != nil {
		fmt.Fprintln(stderr, "dohfwd:", err)
		return 1
	}
	return 0
}

// serve assembles dohfwd natively (its own sockets, Prometheus) and runs
// its listeners.
func serve(ctx context.Context, cfg *config.Config, logTo io.Writer) error {
	upTLS, err := upstreamTLS(cfg)
	if err != nil {
		return err
	}
	// https:// servers: the DoH client shares upTLS (roots, pins, TLS
	// sessions) with the DoT connections, and their limits.
	dohc := dohclient.New(dohclient.Config{
		TLS:         upTLS,
		MaxConns:    cfg.UpstreamTLS.MaxConnections,
		IdleTimeout: cfg.UpstreamTLS.IdleTimeout,
	})
	defer dohc.Close()
	d, err := assembly.New(cfg, assembly.Options{
		LogTo:    logTo,
		Network:  engine.NativeNetwork{TLS: upTLS, DoH: dohc},
		Metrics:  metrics.NewMetrics(),
		BatchLog: true,
		Version:  versionString(),
	})
	if err != nil {
		return err
	}
	defer d.Close() // after the drain: pooled sockets, then the last log batch
	return d.Serve(ctx, assembly.Serving{Version: versionString()})
}

// upstreamTLS is the TLS of the encrypted upstreams: upstream_tls.ca_file's
// roots, or the system's.
func upstreamTLS(cfg *config.Config) (*engine.UpstreamTLS, error) {
	if cfg.UpstreamTLS.CAFile == "" {
		return engine.NewUpstreamTLS(nil), nil
	}
	roots, err := engine.LoadCAFile(cfg.UpstreamTLS.CAFile)
	if err != nil {
		return nil, fmt.Errorf("upstream_tls.ca_file: %w", err)
	}
	return engine.NewUpstreamTLS(roots), nil
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
	cfg, err := config.LoadOrDefault(path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: ok (%d scopes, %d fallback servers, %d hosts)\n",
		cfg.Source, len(cfg.Scopes), len(cfg.FallbackServers), len(cfg.Hosts))
	return 0
}
