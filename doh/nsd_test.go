package doh

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/miekg/dns"
)

// startNSD runs nsd, a real authoritative server from Debian, for zone
// example.test. on 127.0.0.1 until the test ends and returns its address.
func startNSD(t *testing.T) string {
	t.Helper()
	bin := "/usr/sbin/nsd"
	if _, err := os.Stat(bin); err != nil {
		if bin, err = exec.LookPath("nsd"); err != nil {
			t.Skip("SKIPPED: nsd is not installed; `make test` installs it (scripts/setup.d, apt-get install nsd)")
		}
	}
	dir := t.TempDir()
	file := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	zone := file("example.test.zone", `$ORIGIN example.test.
$TTL 300
@    3600 IN SOA ns admin 1 3600 600 86400 120
@    IN NS ns
ns   IN A 127.0.0.1
www  IN A 192.0.2.80
www  90 IN A 192.0.2.81
`)
	for try := 0; try < 3; try++ {
		port := freePort(t)
		conf := file("nsd.conf", fmt.Sprintf(`server:
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
  server-count: 1
remote-control:
  control-enable: no
zone:
  name: example.test
  zonefile: %[3]q
`, port, dir, zone))
		cmd := exec.Command(bin, "-d", "-c", conf)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatalf("nsd: %v", err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		c := &dns.Client{Timeout: 200 * time.Millisecond}
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			if r, _, err := c.Exchange(query(t, "www.example.test.", dns.TypeA, 1), addr); err == nil && r.Rcode == dns.RcodeSuccess {
				return addr
			}
		}
		cmd.Process.Kill()
		t.Logf("nsd did not answer on %s (try %d): %s", addr, try+1, out.Bytes())
	}
	t.Fatal("nsd did not start")
	return ""
}

// freePort finds a port free for both UDP and TCP on 127.0.0.1.
func freePort(t *testing.T) int {
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

// TestHappyPathWithNSD: GET, POST and JSON through the real engine to nsd,
// with Cache-Control from nsd's own TTLs and negative answers.
func TestHappyPathWithNSD(t *testing.T) {
	t.Parallel()
	addr := startNSD(t)
	e, err := engine.New(engine.Config{FallbackServers: []string{addr}}, engine.Options{Network: engine.NativeNetwork{}})
	if err != nil {
		t.Fatal(err)
	}
	base, c := startTLS(t, NewHandler(e, Options{}), Limits{})
	u := base + DefaultPath

	r, body := do(t, c, newRequest(t, "GET", u+"?dns="+b64(pack(t, query(t, "www.example.test.", dns.TypeA, 0))), nil))
	m := unpackAnswer(t, r, body)
	if m.Id != 0 || len(m.Answer) != 2 || r.Header.Get("Cache-Control") != "max-age=90" {
		t.Errorf("GET www A: Cache-Control %q, %v", r.Header.Get("Cache-Control"), m)
	}

	q := query(t, "nope.example.test.", dns.TypeA, 0x4242)
	q.SetEdns0(1232, false)
	q.IsEdns0().Option = append(q.IsEdns0().Option, &dns.EDNS0_PADDING{Padding: make([]byte, 64)})
	r, body = do(t, c, newRequest(t, "POST", u, pack(t, q), "Content-Type", MediaTypeDNS))
	m = unpackAnswer(t, r, body)
	// NXDOMAIN: min(SOA TTL 3600, MINIMUM 120).
	if m.Id != 0x4242 || m.Rcode != dns.RcodeNameError || r.Header.Get("Cache-Control") != "max-age=120" || len(body)%PaddingBlock != 0 {
		t.Errorf("POST nope A: Cache-Control %q, %d bytes, %v", r.Header.Get("Cache-Control"), len(body), m)
	}

	r, body = do(t, c, newRequest(t, "GET", base+JSONPath+"?name=www.example.test&type=MX", nil))
	if r.StatusCode != 200 || r.Header.Get("Cache-Control") != "max-age=120" || !bytes.Contains(body, []byte(`"type":6`)) {
		t.Errorf("JSON NODATA: %d %q %s", r.StatusCode, r.Header.Get("Cache-Control"), body)
	}
}
