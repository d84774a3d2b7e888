package upstreamtest

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/scripts/testtool"
)

// NSDBinary is where Debian's nsd package installs the server.
const NSDBinary = "/usr/sbin/nsd"

// Zone is one zone nsd serves.
type Zone struct {
	Origin string // "example.test."
	Text   string // the zone file
}

// NSDPath returns the nsd binary, or ok false when nsd is not installed.
func NSDPath() (path string, ok bool) {
	if _, err := os.Stat(NSDBinary); err == nil {
		return NSDBinary, true
	}
	path, err := exec.LookPath("nsd")
	return path, err == nil
}

// StartNSD runs nsd, a real authoritative server, for zones on 127.0.0.1
// (UDP and TCP on one random port) until the test ends and returns its
// address once it answers for every zone. Response-rate limiting is off:
// nsd's default drops and truncates answers above ~200 qps. Without nsd
// the test is skipped, loudly.
func StartNSD(t testing.TB, zones ...Zone) string {
	t.Helper()
	return StartNSDWith(t, NSDOptions{}, zones...)
}

// NSDOptions change how nsd answers.
type NSDOptions struct {
	// MinimalResponses leaves the authority and additional sections out
	// of positive answers, as recursive resolvers answer their clients.
	MinimalResponses bool
}

// StartNSDWith is StartNSD with options.
func StartNSDWith(t testing.TB, opts NSDOptions, zones ...Zone) string {
	t.Helper()
	bin, ok := NSDPath()
	if !ok {
		testtool.Missing(t, "nsd is not installed (scripts/setup.d/05-base.sh installs it: apt-get install -y nsd)")
	}
	if len(zones) == 0 {
		t.Fatal("upstreamtest: StartNSD needs at least one zone")
	}
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatalf("upstreamtest: nsd: %v", err)
		}
		return p
	}
	var zoneConf strings.Builder
	for _, z := range zones {
		origin := dns.Fqdn(z.Origin)
		file := write(origin+"zone", z.Text)
		fmt.Fprintf(&zoneConf, "zone:\n  name: %q\n  zonefile: %q\n", origin, file)
	}
	return startAuthoritative(t, "nsd", zones, func(port int) *exec.Cmd {
		conf := write("nsd.conf", nsdConf(dir, port, opts)+zoneConf.String())
		return exec.Command(bin, "-d", "-c", conf)
	}, func() []byte {
		log, _ := os.ReadFile(filepath.Join(dir, "nsd.log"))
		return log
	})
}

// startAuthoritative starts the server command makes for a free port and
// returns its address once it answers for zones. Another process may take
// the port between reserving it and the server binding it, so it tries
// three ports; then it fails t with the server's output and what log
// (may be nil) returns.
func startAuthoritative(t testing.TB, name string, zones []Zone, command func(port int) *exec.Cmd, log func() []byte) string {
	t.Helper()
	const tries = 3
	for try := 1; ; try++ {
		port := FreePort(t)
		cmd := command(port)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatalf("upstreamtest: %s: %v", name, err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		if answersFor(addr, zones, 10*time.Second) {
			return addr
		}
		cmd.Process.Kill()
		if try == tries {
			var more []byte
			if log != nil {
				more = log()
			}
			t.Fatalf("upstreamtest: %s did not answer on %s after %d tries:\n%s\n%s", name, addr, tries, out.Bytes(), more)
		}
	}
}

// nsdConf is the server part of nsd.conf: every file nsd writes stays in
// dir, no chroot, no privilege drop, one process, no rate limiting.
func nsdConf(dir string, port int, opts NSDOptions) string {
	minimal := "no"
	if opts.MinimalResponses {
		minimal = "yes"
	}
	return fmt.Sprintf(`server:
  ip-address: 127.0.0.1@%d
  username: ""
  chroot: ""
  zonesdir: %[2]q
  database: ""
  pidfile: "%[2]s/nsd.pid"
  xfrdfile: "%[2]s/xfrd.state"
  xfrdir: %[2]q
  zonelistfile: "%[2]s/zone.list"
  logfile: "%[2]s/nsd.log"
  rrl-ratelimit: 0
  minimal-responses: %[3]s
  server-count: 1
  verbosity: 1
remote-control:
  control-enable: no
`, port, dir, minimal)
}

// FreeAddr is FreePort as an address, 127.0.0.1:port: free for a server
// to bind, or, left unbound, a port whose connects are refused at once.
func FreeAddr(t testing.TB) string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(FreePort(t)))
}

// FreePort finds a port free for both UDP and TCP on 127.0.0.1, for a
// server in another process that binds both.
func FreePort(t testing.TB) int {
	for {
		u, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("upstreamtest: listen udp: %v", err)
		}
		port := u.LocalAddr().(*net.UDPAddr).Port
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		u.Close()
		if err == nil {
			l.Close()
			return port
		}
	}
}

// answersFor waits until addr answers the SOA of every zone over UDP, so
// a test never races nsd loading its zones.
func answersFor(addr string, zones []Zone, within time.Duration) bool {
	c := &dns.Client{Timeout: 200 * time.Millisecond}
	end := time.Now().Add(within)
	for _, z := range zones {
		q := new(dns.Msg)
		q.SetQuestion(dns.Fqdn(z.Origin), dns.TypeSOA)
		for {
			if r, _, err := c.Exchange(q, addr); err == nil && r.Rcode == dns.RcodeSuccess && len(r.Answer) > 0 {
				break
			}
			if time.Now().After(end) {
				return false
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return true
}
