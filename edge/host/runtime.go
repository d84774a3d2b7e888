// Package host runs dohfwd's WebAssembly module (edge/module) under wazero
// and serves DoH through it: a compiled module, one instance (a pool of
// them, if asked for) answering any number of requests at once, and the
// socket interface of package edge/abi backed by real UDP and TCP sockets
// (engine.NativeNetwork).
//
// An instance has one engine, so the answer cache, coalescing and the
// demotion marks are shared by every request it serves, as in dohfwd serve.
// The host drives it through the asynchronous ABI of package edge/abi
// (instance.go): the module never waits in an import; the host's
// goroutines wait on the sockets and hand their results in as events.
package host

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/dohfwd/dohfwd/engine"
)

// Options configure a Runtime.
type Options struct {
	// CacheDir keeps compiled code between runs; "" compiles in memory
	// every time (about 3 s instead of 0.1 s).
	CacheDir string
	// Network opens the instances' sockets; nil is engine.NativeNetwork.
	Network engine.Network
	// Stderr receives the module's log lines; nil is os.Stderr.
	Stderr io.Writer
	// TCPOnly starts the module's engine without UDP, as on Workers.
	TCPOnly bool
	// NativeHits makes a Pool answer the cache hits its module's engine
	// publishes natively (hits.go; dohfwd-edge's -native-hits); off, every
	// question goes to the module.
	NativeHits bool
}

// Runtime is the module compiled once and ready to instantiate.
type Runtime struct {
	rt       wazero.Runtime
	compiled wazero.CompiledModule
	opts     Options
}

// NewRuntime compiles the module in wasm.
func NewRuntime(ctx context.Context, wasm []byte, opts Options) (*Runtime, error) {
	if opts.Network == nil {
		opts.Network = engine.NativeNetwork{}
	}
	if opts.Stderr == nil {
		opts.Stderr = os.Stderr
	}
	rc := wazero.NewRuntimeConfig()
	if opts.CacheDir != "" {
		cache, err := wazero.NewCompilationCacheWithDir(opts.CacheDir)
		if err != nil {
			return nil, fmt.Errorf("edge: compilation cache %q: %w", opts.CacheDir, err)
		}
		rc = rc.WithCompilationCache(cache)
	}
	rt := wazero.NewRuntimeWithConfig(ctx, rc)
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
		rt.Close(ctx)
		return nil, fmt.Errorf("edge: wasi: %w", err)
	}
	if err := instantiateSockets(ctx, rt); err != nil {
		rt.Close(ctx)
		return nil, fmt.Errorf("edge: socket imports: %w", err)
	}
	compiled, err := rt.CompileModule(ctx, wasm)
	if err != nil {
		rt.Close(ctx)
		return nil, fmt.Errorf("edge: compile module: %w", err)
	}
	return &Runtime{rt: rt, compiled: compiled, opts: opts}, nil
}

// Close releases the runtime and every instance made from it.
func (r *Runtime) Close(ctx context.Context) error { return r.rt.Close(ctx) }
