// Package procs is the GOMAXPROCS rule both servers (dohfwd serve and
// dohfwd-edge) start with.
package procs

import (
	"os"
	"runtime"
)

// Serving is the GOMAXPROCS a server runs with: half the CPUs the Go
// runtime found it may use (at least one), unless the GOMAXPROCS
// environment variable says otherwise (then the runtime already applied
// it, and it stays).
//
// A forwarded question is a few microseconds of work spread over three
// goroutines (the connection's reader, a worker, the write), each woken
// through the scheduler; with a P for every CPU, the idle Ps' threads spin
// looking for that work and are woken and put to sleep again by the
// thousand a second, and the kernel's share of the work (TCP, UDP,
// loopback delivery) and the upstream server find fewer CPUs free.
// Measured on 2 CPUs with scripts/bench-doh.sh's load (interleaved runs of
// the same binary): GOMAXPROCS 1 against 2 took 0.76x the CPU per
// forwarded question and 0.89x per cache hit, at 1.13x the requests a
// second. dohfwd-edge the same way (its host batches events into a poll
// by yielding, edge/host's kick): see edge/README.md. An operator with a
// machine to itself sets GOMAXPROCS.
func Serving(cpus int, env string) int {
	if env != "" {
		return cpus
	}
	return max(1, cpus/2)
}

// SetServing applies Serving to the running process.
func SetServing() {
	runtime.GOMAXPROCS(Serving(runtime.GOMAXPROCS(0), os.Getenv("GOMAXPROCS")))
}
