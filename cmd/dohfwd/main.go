// Command dohfwd is a DNS-over-HTTPS forwarder: it answers RFC 8484 (and
// JSON) queries by forwarding them to classic DNS servers.
//
//	dohfwd                        serve on the embedded default configuration
//	dohfwd serve --config FILE    serve with FILE
//	dohfwd check-config [FILE]    check FILE (or the embedded default) and exit
//	dohfwd status [--admin ADDR]  print a running server's status as a table
//	dohfwd explain NAME [TYPE]    print what a running server would do with a question
//	dohfwd healthcheck            exit 0 when the admin /healthz answers (container HEALTHCHECK)
//	dohfwd profile apple          print the Apple configuration profile (.mobileconfig)
//	dohfwd odoh-query NAME [TYPE] ask one question through an Oblivious DoH relay and target
//	dohfwd version                print the version
//
// The WebAssembly edge host is the separate binary dohfwd-edge
// (cmd/dohfwd-edge), so that this one does not link wazero.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/dohfwd/dohfwd/cmd/internal/buildinfo"
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
  dohfwd profile apple [--config FILE] [-o FILE]
                                 write the Apple configuration profile (.mobileconfig)
  dohfwd odoh-query --target URL [--relay URL] [--ca FILE] [--configs URL] [--http3] [--full] NAME [TYPE]
                                 ask one question through an Oblivious DoH (RFC 9230) relay and target;
                                 print the answer as dig +short does (--full: the whole message)
  dohfwd version                 print the version
The WebAssembly edge host is the dohfwd-edge binary (cmd/dohfwd-edge).
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
	case "profile":
		return profileCommand(args, stdout, stderr)
	case "odoh-query":
		return odohQueryCommand(ctx, args, stdout, stderr)
	case "edge":
		// The wazero host is a binary of its own, so that this one does
		// not link wazero.
		fmt.Fprintln(stderr, "dohfwd: the edge host is the dohfwd-edge binary (go build ./cmd/dohfwd-edge; make edge-host)")
		return 2
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
func versionString() string { return buildinfo.Version(version) }

func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("dohfwd "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}
