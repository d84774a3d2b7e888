package host

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"

	"go.yaml.in/yaml/v3"

	"github.com/dohfwd/dohfwd/doh/assembly"
	"github.com/dohfwd/dohfwd/doh/config"
	"github.com/dohfwd/dohfwd/doh/metrics"
)

// DefaultInstances is the pool size: one instance, one engine, answering
// every request at once, so that cache, coalescing and demotion marks are
// the host's, as in dohfwd serve. More instances split that state.
func DefaultInstances() int { return 1 }

// Main is the dohfwd-edge command (cmd/dohfwd-edge): it loads the
// configuration (the file, or the embedded default), starts a pool of
// module instances configured with the same YAML, and serves DoH over
// them with the listeners and handler package assembly builds until ctx
// ends or SIGTERM.
func Main(ctx context.Context, args []string, stderr io.Writer, version string) error {
	fs := flag.NewFlagSet("dohfwd-edge", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "configuration `FILE` (default: the embedded default)")
	modPath := fs.String("module", filepath.Join("dist", "dohfwd.wasm"), "the WebAssembly `FILE` built by make wasm")
	instances := fs.Int("instances", DefaultInstances(), "module instances, each with its own engine (more split the cache and demotion marks)")
	cacheDir := fs.String("cache-dir", defaultCacheDir(), "compilation cache `DIR` (\"\" compiles in memory)")
	tcpOnly := fs.Bool("tcp-only", false, "run the module's engine with TCP as its only upstream transport, as on Workers (to test or measure that path natively)")
	nativeHits := fs.Bool("native-hits", true, "answer the cache hits the module's engine publishes natively, from a mirror of its hot entries (false: every question goes to the module)")
	encode := fs.Bool("encode-config", false, "print the configuration as the module takes it (Workers' DOHFWD_CONFIG) and exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if path := os.Getenv("DOHFWD_CPUPROFILE"); path != "" {
		stop, err := startCPUProfile(path)
		if err != nil {
			return err
		}
		defer stop()
	}
	cfg, err := config.LoadOrDefault(*cfgPath)
	if err != nil {
		return err
	}
	if *encode {
		b, err := config.Encode(cfg)
		if err != nil {
			return err
		}
		_, err = os.Stdout.Write(append(b, '\n'))
		return err
	}
	wasm, err := os.ReadFile(*modPath)
	if err != nil {
		return fmt.Errorf("module: %w", err)
	}
	// The module gets the configuration as loaded (the embedded default
	// with its system scope included) in the same YAML form.
	configYAML, err := yaml.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	rt, err := NewRuntime(ctx, wasm, Options{CacheDir: *cacheDir, Stderr: stderr, TCPOnly: *tcpOnly, NativeHits: *nativeHits})
	if err != nil {
		return err
	}
	defer rt.Close(context.Background())
	pool, err := NewPool(ctx, rt, configYAML, *instances)
	if err != nil {
		return err
	}
	defer pool.Close(context.Background())

	// The engines run in the module instances; the host runs the rest
	// natively, as dohfwd serve does: the listeners, the certificates,
	// Prometheus, and the DoH front end (HTTP/2, the requests' checks,
	// the client limits, the JSON form, Server-Timing), whose resolver is
	// the pool. The module is handed only questions: its wasm runs
	// several times slower than native code.
	met := metrics.NewMetrics()
	d, err := assembly.New(cfg, assembly.Options{LogTo: stderr, Metrics: met, Resolver: pool, Version: version})
	if err != nil {
		return err
	}
	d.Log.Info().Str("module", *modPath).Int("instances", *instances).Bool("native_hits", *nativeHits).Str("cache_dir", *cacheDir).Msg("edge module ready")

	met.CollectAttemptLatency(pool.AttemptLatency)
	return d.Serve(ctx, assembly.Serving{Backend: pool, Handler: d.Handler, Version: version})
}

func defaultCacheDir() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "dohfwd", "wazero")
}

// startCPUProfile writes a CPU profile of the host (wazero runs the
// module's code on the host's goroutines, so it is in there too) to path
// until stop; set by the hidden DOHFWD_CPUPROFILE, for scripts/bench-edge.sh.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile %q: %w", path, err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
