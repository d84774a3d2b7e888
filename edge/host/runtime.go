// Package host runs dohfwd's WebAssembly module (edge/module) under wazero
// and serves DoH through it: a compiled module, a pool of instances each
// serving one request at a time, and the socket interface of package
// edge/abi backed by real UDP and TCP sockets (engine.NativeNetwork).
//
// Each instance has its own engine, so demotion marks and the answer cache
// are per instance: a server demoted by one instance is still asked first
// by another until that one sees it fail too.
package host

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/dohfwd/dohfwd/edge/abi"
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
	if err := instantiateSockets(ctx, rt, opts.Network); err != nil {
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

// Instance is one instantiated module with its engine. It serves one call
// at a time; it is not safe for concurrent use.
type Instance struct {
	mod                                api.Module
	memory                             linearMemory
	buffer, serve, status, reconfigure api.Function
	sockets                            sockets
	// request is the context of the HTTP request the running Serve call
	// answers; the socket imports give up when it is done. Nil between
	// calls.
	request context.Context
	// receiving is 1 while the module waits in sock_recv: what a test
	// waits for before its client goes away mid-question.
	receiving atomic.Int32
}

// errClosed is what a call into a closed instance returns.
var errClosed = errors.New("edge: instance closed")

// enter keeps the instance's memory mapped until leave, across calls and
// the host's reads and writes of it; false once the instance is closed.
func (in *Instance) enter() bool { return in.memory.enter() }
func (in *Instance) leave()      { in.memory.leave() }

// NewInstance instantiates the module and configures it with configYAML,
// the same YAML as the server's.
func (r *Runtime) NewInstance(ctx context.Context, configYAML []byte) (*Instance, error) {
	mc := wazero.NewModuleConfig().
		WithName(""). // anonymous, so there may be many
		WithStartFunctions("_initialize").
		WithSysWalltime().WithSysNanotime().WithSysNanosleep().
		WithRandSource(rand.Reader).
		WithStderr(r.opts.Stderr).WithStdout(r.opts.Stderr)
	in := &Instance{}
	ctx = withInstance(ctx, in)
	// The instance's memory is reserved address space that grows in place
	// (memory_unix.go), not wazero's slice that grows by copying.
	alloc := experimental.MemoryAllocatorFunc(func(_, max uint64) experimental.LinearMemory {
		in.memory = newLinearMemory(max)
		return in.memory
	})
	mod, err := r.rt.InstantiateModule(experimental.WithMemoryAllocator(ctx, alloc), r.compiled, mc)
	if err != nil {
		return nil, fmt.Errorf("edge: instantiate: %w", err)
	}
	if in.memory == nil {
		mod.Close(ctx)
		return nil, errors.New("edge: module has no memory")
	}
	in.mod = mod
	in.buffer = mod.ExportedFunction(abi.ExportBuffer)
	in.serve = mod.ExportedFunction(abi.ExportServe)
	in.status = mod.ExportedFunction(abi.ExportStatus)
	in.reconfigure = mod.ExportedFunction(abi.ExportReconfigure)
	initFn := mod.ExportedFunction(abi.ExportInit)
	if in.buffer == nil || in.serve == nil || in.status == nil || in.reconfigure == nil || initFn == nil {
		mod.Close(ctx)
		return nil, errors.New("edge: module lacks the dohfwd exports")
	}
	if !in.enter() {
		return nil, errClosed
	}
	defer in.leave()
	if err := in.put(ctx, configYAML); err != nil {
		mod.Close(ctx)
		return nil, err
	}
	var flags uint64
	if r.opts.TCPOnly {
		flags |= abi.InitTCPOnly
	}
	res, err := initFn.Call(ctx, uint64(len(configYAML)), flags)
	if err != nil {
		mod.Close(ctx)
		return nil, fmt.Errorf("edge: init: %w", err)
	}
	if n := uint32(res[0]); n != 0 {
		msg, _ := in.result(ctx, n)
		mod.Close(ctx)
		return nil, fmt.Errorf("edge: module config: %s", msg)
	}
	return in, nil
}

// put writes b into the module's buffer.
func (in *Instance) put(ctx context.Context, b []byte) error {
	res, err := in.buffer.Call(ctx, uint64(len(b)))
	if err != nil {
		return fmt.Errorf("edge: buffer: %w", err)
	}
	if !in.mod.Memory().Write(uint32(res[0]), b) {
		return errors.New("edge: buffer out of range")
	}
	return nil
}

// result copies the n bytes of the last result out of the module.
func (in *Instance) result(ctx context.Context, n uint32) ([]byte, error) {
	res, err := in.buffer.Call(ctx, 0)
	if err != nil {
		return nil, fmt.Errorf("edge: buffer: %w", err)
	}
	b, ok := in.mod.Memory().Read(uint32(res[0]), n)
	if !ok {
		return nil, errors.New("edge: result out of range")
	}
	return append([]byte(nil), b...), nil
}

// Serve hands one encoded abi.Request to the module and returns the
// encoded abi.Response. The module runs to its end; when ctx is done
// (the client went away) the socket imports it is blocked in, or calls
// next, return abi.Cancelled, and the module's engine ends the question
// as the native one does.
func (in *Instance) Serve(ctx context.Context, req []byte) ([]byte, error) {
	if !in.enter() {
		return nil, errClosed
	}
	defer in.leave()
	in.request = ctx
	defer func() { in.request = nil }()
	// wazero never sees ctx's cancellation: a call stopped midway would
	// leave the module's state (its engine) half updated.
	ctx = withInstance(context.WithoutCancel(ctx), in)
	defer in.sockets.closeAll()
	if err := in.put(ctx, req); err != nil {
		return nil, err
	}
	res, err := in.serve.Call(ctx, uint64(len(req)))
	if err != nil {
		return nil, fmt.Errorf("edge: serve: %w", err)
	}
	return in.result(ctx, uint32(res[0]))
}

// Status returns the instance's engine status as JSON.
func (in *Instance) Status(ctx context.Context) ([]byte, error) {
	if !in.enter() {
		return nil, errClosed
	}
	defer in.leave()
	res, err := in.status.Call(withInstance(ctx, in))
	if err != nil {
		return nil, fmt.Errorf("edge: status: %w", err)
	}
	return in.result(ctx, uint32(res[0]))
}

// Reconfigure hands the instance's engine a new configuration as JSON.
func (in *Instance) Reconfigure(ctx context.Context, cfgJSON []byte) error {
	if !in.enter() {
		return errClosed
	}
	defer in.leave()
	ctx = withInstance(ctx, in)
	if err := in.put(ctx, cfgJSON); err != nil {
		return err
	}
	res, err := in.reconfigure.Call(ctx, uint64(len(cfgJSON)))
	if err != nil {
		return fmt.Errorf("edge: reconfigure: %w", err)
	}
	if n := uint32(res[0]); n != 0 {
		msg, _ := in.result(ctx, n)
		return fmt.Errorf("edge: reconfigure: %s", msg)
	}
	return nil
}

// Close ends the instance.
func (in *Instance) Close(ctx context.Context) error {
	in.sockets.closeAll()
	return in.mod.Close(ctx)
}
