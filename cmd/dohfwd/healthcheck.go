package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/dohfwd/dohfwd/doh/config"
)

// healthcheckCommand asks a running server's admin listener for /healthz
// and exits 0 when it answers 200. It is the container image's
// HEALTHCHECK, which has no shell or curl to do it.
func healthcheckCommand(ctx context.Context, args []string, stderr io.Writer) int {
	fs := newFlags("healthcheck", stderr)
	addr := fs.String("admin", "", "the server's admin listener `ADDR` (default: listen.admin of --config)")
	path := fs.String("config", "", "read the admin address from configuration `FILE`")
	timeout := fs.Duration("timeout", 2*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	target := *addr
	if target == "" {
		cfg, err := config.LoadOrDefault(*path)
		if err != nil {
			fmt.Fprintln(stderr, "dohfwd healthcheck:", err)
			return 1
		}
		if cfg.Listen.Admin == "" {
			fmt.Fprintln(stderr, "dohfwd healthcheck: listen.admin is off; nothing to ask")
			return 1
		}
		target = cfg.Listen.Admin
	}
	if err := checkHealth(ctx, dialable(target), *timeout); err != nil {
		fmt.Fprintln(stderr, "dohfwd healthcheck:", err)
		return 1
	}
	return 0
}

func checkHealth(ctx context.Context, addr string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/healthz", nil)
	if err != nil {
		return fmt.Errorf("admin %q: %w", addr, err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("admin %s: %w", addr, err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("admin %s: GET /healthz: %s", addr, res.Status)
	}
	return nil
}

// dialable turns a listen address into one to connect to: a wildcard host
// (":9153", "0.0.0.0:9153", "[::]:9153") means this machine's loopback.
func dialable(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return net.JoinHostPort(host, port)
}
