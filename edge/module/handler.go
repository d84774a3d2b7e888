//go:build wasip1

package main

import (
	"fmt"
	"net/http"
	"net/netip"
	"os"

	"github.com/dohfwd/dohfwd/config"
	"github.com/dohfwd/dohfwd/doh"
	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/telemetry"
)

// newHandler is the server's DoH handler over e, with the server's path,
// trusted proxies, Server-Timing and trace context.
func newHandler(e *engine.Engine, cfg *config.Config) (http.Handler, error) {
	var trusted []netip.Prefix
	for _, s := range cfg.Listen.TrustedProxies {
		p, err := config.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("listen.trusted_proxies: %w", err)
		}
		trusted = append(trusted, p)
	}
	return doh.NewHandler(e, doh.Options{Path: cfg.Listen.Path, TrustedProxies: trusted,
		ServerTiming: cfg.Listen.ServerTiming, TraceContext: cfg.Listen.TraceContext}), nil
}

// newObserver logs the engine's attempt and question events as the server
// does, as JSON on the module's stderr (the host's log). Metrics stay
// with the host.
func newObserver(cfg *config.Config) (engine.Observer, error) {
	log, err := telemetry.NewLogger(os.Stderr, "json", cfg.Log.Level)
	if err != nil {
		return nil, fmt.Errorf("log.level: %w", err)
	}
	return telemetry.NewObserver(log, nil), nil
}
