package host

import (
	"context"
	"flag"
	"fmt"
	"io"
	stdlog "log"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"

	"go.yaml.in/yaml/v3"

	"github.com/dohfwd/dohfwd/config"
	"github.com/dohfwd/dohfwd/metrics"
	"github.com/dohfwd/dohfwd/server"
	"github.com/dohfwd/dohfwd/telemetry"
)

// Usage is the edge subcommand's synopsis.
const Usage = `dohfwd edge [--config FILE] [--module FILE] [--instances N] [--cache-dir DIR]
    serve DoH through the WebAssembly module under wazero, with the same
    configuration, listeners, TLS and admin as dohfwd serve`

// DefaultInstances is the pool size: each instance answers one question at
// a time and waits on the network most of that time, so more instances
// than cores pay off.
func DefaultInstances() int { return max(8, 4*runtime.GOMAXPROCS(0)) }

// Main is `dohfwd edge`: it loads the configuration (the file, or the
// embedded default), starts a pool of module instances configured with
// the same YAML, and serves them through package server until ctx ends or
// SIGTERM.
func Main(ctx context.Context, args []string, stderr io.Writer, version string) error {
	fs := flag.NewFlagSet("edge", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "configuration `FILE` (default: the embedded default)")
	modPath := fs.String("module", filepath.Join("dist", "dohfwd.wasm"), "the WebAssembly `FILE` built by make wasm")
	instances := fs.Int("instances", DefaultInstances(), "module instances, each serving one request at a time")
	cacheDir := fs.String("cache-dir", defaultCacheDir(), "compilation cache `DIR` (\"\" compiles in memory)")
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
	var cfg *config.Config
	var err error
	if *cfgPath == "" {
		cfg, err = config.Default()
	} else {
		cfg, err = config.Load(*cfgPath)
	}
	if err != nil {
		return err
	}
	wasm, err := os.ReadFile(*modPath)
	if err != nil {
		return fmt.Errorf("module: %w", err)
	}
	log, err := telemetry.NewLogger(stderr, cfg.Log.Format, cfg.Log.Level)
	if err != nil {
		return err
	}
	// Lines from Go's log package (certmagic, net/http) join the stream.
	stdlog.SetFlags(0)
	stdlog.SetOutput(telemetry.LineWriter(log))
	// The module gets the configuration as loaded (the embedded default
	// with its system scope included) in the same YAML form.
	configYAML, err := yaml.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}

	rt, err := NewRuntime(ctx, wasm, Options{CacheDir: *cacheDir, Stderr: stderr})
	if err != nil {
		return err
	}
	defer rt.Close(context.Background())
	pool, err := NewPool(ctx, rt, configYAML, *instances)
	if err != nil {
		return err
	}
	defer pool.Close(context.Background())
	log.Info().Str("module", *modPath).Int("instances", *instances).Str("cache_dir", *cacheDir).Msg("edge module ready")

	met := metrics.NewMetrics()
	met.CollectEngine(pool)
	return server.Run(ctx, server.Options{
		Config:  cfg,
		Handler: Handler{Pool: pool},
		Backend: pool,
		Metrics: met,
		Log:     log,
		Version: version,
	})
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
