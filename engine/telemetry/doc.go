// Package telemetry is how dohfwd reports what it does: zerolog logs (JSON
// on stderr, console format on a terminal), the engine's per-attempt and
// per-question log events. Metrics are package metrics.
package telemetry
