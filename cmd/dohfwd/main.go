// Command dohfwd is a DNS-over-HTTPS forwarder: it answers RFC 8484 (and
// JSON) queries by forwarding them to classic DNS servers.
//
//	dohfwd                        serve on the embedded default configuration
//	dohfwd serve --config FILE    serve with FILE
//	dohfwd check-config [FILE]    check FILE (or the embedded default) and exit
//	dohfwd status [--admin ADDR]  print a running server's status as a table
//	dohfwd explain NAME [TYPE]    print what a running server would do with a question
//	dohfwd healthcheck            exit 0 when the admin /healthz answers (container HEALTHCHECK)
//	dohfwd version                print the version
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"github.com/dohfwd/dohfwd/edge/host"
)

// version is set at build time: -ldflags "-X main.version=v1.2.3".
var version = ""

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage:
  dohfwd                         serve on the embedded default configuration
  dohfwd serve [--config FILE]   serve with FILE (default: the embedded default)
  dohfwd check-config [FILE]     check FILE (default: the embedded default) and exit
  dohfwd status [--admin ADDR]   print a running server's status (default admin 127.0.0.1:9153)
  dohfwd explain [--admin ADDR] NAME [TYPE]
                                 print what a running server would do with a question: scope and why,
                                 candidates, cache, server order and the next server (nothing is sent)
  dohfwd healthcheck [--config FILE | --admin ADDR]  exit 0 when the admin /healthz answers 200
  dohfwd edge [--config FILE] [--module FILE] [--instances N] [--cache-dir DIR]
                                 serve through the WebAssembly module under wazero (edge/host)
  dohfwd version                 print the version
`

// run is the whole command line; it returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd := "serve"
	if len(args) > 0 {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return serveCommand(ctx, args, stderr)
	case "check-config":
		return checkConfigCommand(args, stdout, stderr)
	case "status":
		return statusCommand(ctx, args, stdout, stderr)
	case "explain":
		return explainCommand(ctx, args, stdout, stderr)
	case "healthcheck":
		return healthcheckCommand(ctx, args, stderr)
	case "edge":
		if err := host.Main(ctx, args, stderr, versionString()); err != nil {
			fmt.Fprintln(stderr, "dohfwd edge:", err)
			return 1
		}
		return 0
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, "dohfwd", versionString())
		return 0
	case "help", "-h", "--help", "-help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "dohfwd: unknown command %q\n%s", cmd, usage)
	return 2
}

// versionString is the -ldflags version, else the module's build info.
func versionString() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		rev, dirty := "", false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if rev != "" {
			if len(rev) > 12 {
				rev = rev[:12]
			}
			if dirty {
				rev += "-dirty"
			}
			return "dev-" + rev
		}
		if bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			return bi.Main.Version
		}
	}
	return "dev"
}

func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("dohfwd "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}
