//go:build wasip1

package main

import (
	"os"

	"github.com/dohfwd/dohfwd/doh/assembly"
	"github.com/dohfwd/dohfwd/doh/config"
	"github.com/dohfwd/dohfwd/engine/telemetry"
)

// assemble builds the instance's engine and DoH handler as the server
// does (package assembly), over the host's sockets. The log goes out as
// JSON on the module's stderr (the host's log). Instead of Prometheus the
// instance tallies attempt latencies, which its host reads with the
// status (abi.Status) and exports.
func assemble(cfg *config.Config, tcpOnly bool, latency *telemetry.LatencyTally, network hostNetwork) (*assembly.Dohfwd, error) {
	return assembly.New(cfg, assembly.Options{
		LogTo:     os.Stderr,
		LogFormat: "json",
		Network:   network,
		TCPOnly:   tcpOnly,
		Metrics:   latency,
	})
}
