package engine_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/miekg/dns"
)

// The happy path against a real DNS server from Debian: nsd on 127.0.0.1
// with a random port, answering a plain question over UDP and a ~4 KB TXT
// RRset that truncates over UDP and comes whole over TCP.

const nsdBinary = "/usr/sbin/nsd"

// startNSD runs nsd for zone example.test. until the test ends and returns
// its address.
func startNSD(t testing.TB) string {
	t.Helper()
	bin := nsdBinary
	if _, err := os.Stat(bin); err != nil {
		if p, err := exec.LookPath("nsd"); err == nil {
			bin = p
		} else {
			t.Skip("SKIPPED LOUDLY: nsd is not installed (scripts/setup.d/10-dns-servers.sh installs it: apt-get install -y nsd)")
		}
	}
	dir := t.TempDir()
	var zone strings.Builder
	zone.WriteString("$ORIGIN example.test.\n$TTL 300\n")
	zone.WriteString("@ IN SOA ns.example.test. admin.example.test. 1 3600 600 86400 300\n@ IN NS ns\nns IN A 127.0.0.1\n")
	zone.WriteString("www IN A 192.0.2.80\nwww IN AAAA 2001:db8::80\n")
	for i := range 20 { // 20 x ~200 bytes: ~4 KB, over 1232
		fmt.Fprintf(&zone, "big IN TXT \"%s%02d\"\n", strings.Repeat("x", 198), i)
	}
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("example.test.zone", zone.String())

	for try := 0; ; try++ {
		port := freePort(t)
		write("nsd.conf", fmt.Sprintf(`server:
  ip-address: 127.0.0.1@%d
  username: ""
  chroot: ""
  zonesdir: %q
  database: ""
  pidfile: %q
  xfrdfile: %q
  xfrdir: %q
  zonelistfile: %q
  logfile: %q
  rrl-ratelimit: 0
  server-count: 1
  verbosity: 1
remote-control:
  control-enable: no
zone:
  name: example.test
  zonefile: %q
`, port, dir, filepath.Join(dir, "nsd.pid"), filepath.Join(dir, "xfrd.state"), dir,
			filepath.Join(dir, "zone.list"), filepath.Join(dir, "nsd.log"), filepath.Join(dir, "example.test.zone")))
		cmd := exec.Command(bin, "-d", "-c", filepath.Join(dir, "nsd.conf"))
		var stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stderr, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatalf("nsd: %v", err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		if waitDNS(addr, 10*time.Second) {
			return addr
		}
		log, _ := os.ReadFile(filepath.Join(dir, "nsd.log"))
		cmd.Process.Kill()
		if try == 2 {
			t.Fatalf("nsd did not answer on %s:\n%s\n%s", addr, stderr.Bytes(), log)
		}
	}
}

// freePort finds a port free for both UDP and TCP on 127.0.0.1.
func freePort(t testing.TB) int {
	for {
		u, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
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

// waitDNS waits until addr answers a query over UDP.
func waitDNS(addr string, within time.Duration) bool {
	c := &dns.Client{Timeout: 200 * time.Millisecond}
	q := newQuery("www.example.test.", dns.TypeA)
	for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if r, _, err := c.Exchange(q, addr); err == nil && r.Rcode == dns.RcodeSuccess {
			return true
		}
	}
	return false
}

func TestNSDHappyPathAndTruncation(t *testing.T) {
	t.Parallel()
	addr := startNSD(t)
	log := &eventLog{}
	e, err := engine.New(engine.Config{Scopes: []engine.ScopeConfig{{Name: "test", Domains: []string{"example.test."}, Servers: []string{addr}}}},
		engine.Options{Network: engine.NativeNetwork{}, Observer: log})
	if err != nil {
		t.Fatal(err)
	}
	ask := func(name string, qtype uint16) engine.Response {
		q := newQuery(name, qtype)
		q.Id = 0xABCD
		q.SetEdns0(4096, true)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res := e.Resolve(ctx, q)
		if res.Msg.Id != 0xABCD {
			t.Fatalf("client ID %#x", res.Msg.Id)
		}
		return res
	}

	res := ask("WWW.Example.Test.", dns.TypeA)
	if res.Result != engine.ResultAnswer || len(res.Msg.Answer) != 1 || res.Msg.Answer[0].(*dns.A).A.String() != "192.0.2.80" {
		t.Fatalf("www A: %v %v", res.Result, res.Msg)
	}
	res = ask("nope.example.test.", dns.TypeA)
	if res.Result != engine.ResultNXDomain || res.Msg.Rcode != dns.RcodeNameError {
		t.Fatalf("nope: %v rcode %d", res.Result, res.Msg.Rcode)
	}
	res = ask("www.example.test.", dns.TypeMX) // NODATA is an answer
	if res.Result != engine.ResultAnswer || len(res.Msg.Answer) != 0 || len(res.Msg.Ns) == 0 {
		t.Fatalf("NODATA: %v %v", res.Result, res.Msg)
	}

	before := len(log.attemptList())
	res = ask("big.example.test.", dns.TypeTXT)
	var got []string
	for _, a := range log.attemptList()[before:] {
		got = append(got, fmt.Sprintf("%s/%s", a.Transport, a.Outcome))
	}
	if !equalStrings(got, []string{"udp/truncated", "tcp/answer"}) {
		t.Fatalf("attempts %v, want a real truncation answered over TCP", got)
	}
	if res.Result != engine.ResultAnswer || len(res.Msg.Answer) != 20 || res.Msg.Len() < 4000 {
		t.Fatalf("big TXT: %v, %d records, %d bytes", res.Result, len(res.Msg.Answer), res.Msg.Len())
	}
	if c := e.Counters(); c.UpstreamFailed != 0 || c.MismatchedReplies != 0 {
		t.Fatalf("counters %+v", c)
	}
}
