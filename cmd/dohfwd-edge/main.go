// Command dohfwd-edge serves DoH through dohfwd's WebAssembly module under
// wazero (package edge/host), with the same configuration, listeners, TLS
// and admin as dohfwd serve:
//
//	dohfwd-edge [--config FILE] [--module FILE] [--instances N] [--cache-dir DIR]
//
// It runs on half the CPUs unless GOMAXPROCS is set, as dohfwd serve
// does (package procs). It is a binary of its own so that dohfwd, the
// server most deployments run (and the container image), does not link
// wazero.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/dohfwd/dohfwd/cmd/internal/buildinfo"
	"github.com/dohfwd/dohfwd/cmd/internal/procs"
	"github.com/dohfwd/dohfwd/edge/host"
)

// version is set at build time: -ldflags "-X main.version=v1.2.3".
var version = ""

func main() {
	procs.SetServing() // as dohfwd serve: half the CPUs unless GOMAXPROCS is set
	if err := host.Main(context.Background(), os.Args[1:], os.Stderr, buildinfo.Version(version)); err != nil {
		fmt.Fprintln(os.Stderr, "dohfwd-edge:", err)
		os.Exit(1)
	}
}
