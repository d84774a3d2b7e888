package main

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"

	"github.com/dohfwd/dohfwd/doh/assembly"
	"github.com/dohfwd/dohfwd/doh/config"
	"github.com/dohfwd/dohfwd/doh/server"
	"github.com/dohfwd/dohfwd/doh/setup"
)

// profileCommand writes the Apple configuration profile of a configured
// server: `dohfwd profile apple [--config FILE] [-o FILE]`.
func profileCommand(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "apple" {
		fmt.Fprintln(stderr, "usage: dohfwd profile apple [--config FILE] [-o FILE]")
		return 2
	}
	fs := newFlags("profile apple", stderr)
	path := fs.String("config", "", "configuration `FILE` (default: the embedded default)")
	out := fs.String("o", "", "write the profile to `FILE` (default: standard output)")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	cfg, err := config.LoadOrDefault(*path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	// The ports are the configured ones: the profile is for a server
	// that listens where its file says.
	bound := map[string]netip.AddrPort{}
	for name, addr := range map[string]string{"https": cfg.Listen.HTTPS, "dot": cfg.Listen.DoT} {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			continue // off
		}
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil || n == 0 {
			continue // a free port: unknown until the server runs
		}
		ip, err := netip.ParseAddr(host)
		if err != nil {
			ip = netip.IPv4Unspecified()
		}
		bound[name] = netip.AddrPortFrom(ip, uint16(n))
	}
	d := server.Designation(cfg, bound, nil)
	if len(d.Names) == 0 {
		fmt.Fprintf(stderr, "%s: no server name for the profile: set ddr.names (or tls.acme.domains)\n", cfg.Source)
		return 1
	}
	pages, err := assembly.SetupPages(cfg)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	body := setup.AppleProfile(setup.SiteFrom(d, cfg.Listen.Path, ""))
	if pages.Signer != nil {
		if body, err = pages.Signer.Sign(body); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
	}
	if *out == "" {
		stdout.Write(body)
		return 0
	}
	if err := os.WriteFile(*out, body, 0o644); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}
