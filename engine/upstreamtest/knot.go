package upstreamtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/scripts/testtool"
)

// KnotBinary is where Debian's knot package installs the server.
const KnotBinary = "/usr/sbin/knotd"

// StartKnotCookies runs Knot DNS, a real authoritative server, for zones
// on 127.0.0.1 with its DNS cookies module (RFC 7873, RFC 9018 server
// cookies) answering BADCOOKIE to every query without a valid server
// cookie, until the test ends. It returns the address once the server
// answers for every zone. Knot keeps the question's case. (The nsd and
// unbound packages of Debian 12 predate their answer-cookie option.)
func StartKnotCookies(t testing.TB, zones ...Zone) string {
	t.Helper()
	bin := KnotBinary
	if _, err := os.Stat(bin); err != nil {
		p, err := exec.LookPath("knotd")
		if err != nil {
			testtool.Missing(t, "knotd is not installed (scripts/setup.d/05-base.sh installs it: apt-get install -y knot)")
		}
		bin = p
	}
	if len(zones) == 0 {
		t.Fatal("upstreamtest: StartKnotCookies needs at least one zone")
	}
	dir := t.TempDir()
	var zoneConf strings.Builder
	for _, z := range zones {
		origin := dns.Fqdn(z.Origin)
		file := filepath.Join(dir, origin+"zone")
		if err := os.WriteFile(file, []byte(z.Text), 0o644); err != nil {
			t.Fatalf("upstreamtest: knot: %v", err)
		}
		fmt.Fprintf(&zoneConf, "  - domain: %q\n    file: %q\n", origin, file)
	}
	return startAuthoritative(t, "knot", zones, func(port int) *exec.Cmd {
		conf := filepath.Join(dir, "knot.conf")
		text := fmt.Sprintf(`server:
  listen: 127.0.0.1@%d
  rundir: %[2]q
  udp-workers: 1
  tcp-workers: 1
  background-workers: 1
database:
  storage: %[2]q
mod-cookies:
  - id: default
    badcookie-slip: 1
template:
  - id: default
    storage: %[2]q
    global-module: mod-cookies/default
log:
  - target: stderr
    any: info
zone:
%s`, port, dir, zoneConf.String())
		if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
			t.Fatalf("upstreamtest: knot: %v", err)
		}
		return exec.Command(bin, "-c", conf)
	}, nil)
}
