package main

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/engine/upstreamtest"
)

// DoH upstreams (https://IP:PORT/PATH#NAME) end to end through the
// binary: real DoH servers (Debian's unbound with do-udp: no, so only its
// DoH port can answer; dnsdist's addDOHLocal in front of nsd), real DoH
// clients in front (kdig, dig, curl), and a Go fake for what real servers
// do only when broken (a 500, a 415, an HTML page, idle closes).

// dohURL is the https:// server string of a DoH listener at addr.
func dohURL(addr, path, name string) string { return "https://" + addr + path + "#" + name }

// serverStatus is the /status entry of the first server of scope i.
func serverStatus(t *testing.T, d *dohfwd, i int) map[string]any {
	t.Helper()
	return d.status()["scopes"].([]any)[i].(map[string]any)["servers"].([]any)[0].(map[string]any)
}

// ddZone is what the nsd behind dnsdist serves.
const ddZone = `$ORIGIN dd.test.
$TTL 300
@ IN SOA ns.dd.test. admin.dd.test. 1 3600 600 86400 120
@ IN NS ns
ns IN A 127.0.0.1
* IN A 192.0.2.97
`

func TestUpstreamDoHRealServers(t *testing.T) {
	t.Parallel()
	ca := upstreamtest.NewCA(t)
	ub := upstreamtest.StartUnbound(t, needTool(t, "unbound"), ca)
	needTool(t, "nsd")
	nsd := upstreamtest.StartNSD(t, upstreamtest.Zone{Origin: "dd.test.", Text: ddZone})
	dd := upstreamtest.StartDnsdistDoH(t, needTool(t, "dnsdist"), ca, nsd, "probe.dd.test")
	ubURL, ddURL := dohURL(ub.DoH, "/dns-query", "localhost"), dohURL(dd.DoH, "/dns-query", "localhost")
	d := startDohfwd(t, encryptedYAML(ca.PEMFile(t, t.TempDir()), []string{"u.enc.test", "dd.test"},
		[]string{ubURL, ddURL}), newPKI(t))

	for i, c := range []struct{ tool, name, want string }{
		{"kdig", "a.u.enc.test", upstreamtest.EncUnboundA},
		{"dig", "b.u.enc.test", upstreamtest.EncUnboundA},
		{"kdig", "a.dd.test", "192.0.2.97"},
		{"dig", "b.dd.test", "192.0.2.97"},
	} {
		out := runTool(t, c.tool, d.digArgs("+https", c.name, "A")...)
		if !strings.Contains(out, "NOERROR") || !strings.Contains(out, c.want) {
			t.Fatalf("%d: %s %s: want %s:\n%s", i, c.tool, c.name, c.want, out)
		}
	}
	host, port, _ := net.SplitHostPort(d.HTTPS)
	out := runTool(t, "curl", "-sS", "--cacert", d.pki.CA, "--resolve", "localhost:"+port+":"+host,
		"https://localhost:"+port+"/resolve?name=c.dd.test&type=A")
	if !strings.Contains(out, `"Status":0`) || !strings.Contains(out, "192.0.2.97") {
		t.Fatalf("curl JSON: %s", out)
	}

	// Each attempt's event: transport doh, the first on a new
	// connection, the next on the same one.
	for _, srv := range []string{ub.DoH, dd.DoH} {
		var conns []string
		for _, ev := range d.eventsAtLeast(2, func(ev map[string]any) bool { return ev["message"] == "attempt" && ev["server"] == srv }) {
			if ev["transport"] != "doh" || ev["outcome"] != "answer" {
				t.Fatalf("attempt %v: want an answer over doh", ev)
			}
			conns = append(conns, fmt.Sprint(ev["conn"]))
		}
		if len(conns) < 2 || conns[0] != "new" || conns[1] != "reused" {
			t.Fatalf("%s: connections %v, want new then reused", srv, conns)
		}
	}

	// /status, dohfwd status and /metrics: transport, open connections,
	// handshakes, reuse.
	for i := range 2 {
		sv := serverStatus(t, d, i)
		cs, _ := sv["connections"].(map[string]any)
		if sv["transport"] != "doh" || cs == nil || cs["open"].(float64) != 1 || cs["handshakes"].(float64) != 1 || cs["reused"].(float64) < 1 {
			t.Fatalf("scope %d status %v", i, sv)
		}
	}
	table := runTool(t, binary, "status", "--admin", d.Admin)
	if !strings.Contains(table, ubURL) || !strings.Contains(table, "doh") || !strings.Contains(table, "open 1, handshakes 1") {
		t.Fatalf("dohfwd status:\n%s", table)
	}
	res, err := http.Get("http://" + d.Admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	for _, want := range []string{
		`dohfwd_upstream_connections{server="` + ubURL + `",transport="doh"} 1`,
		`dohfwd_upstream_handshakes_total{server="` + ddURL + `",transport="doh"} 1`,
		`dohfwd_upstream_reused_total{server="` + ubURL + `",transport="doh"}`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
}

// A wrong TLS name, and a certificate no configured root trusts: every
// attempt fails its handshake with class tls, the question is
// unavailable, and the EDE names the server.
func TestUpstreamDoHRefusedCertificates(t *testing.T) {
	t.Parallel()
	ca := upstreamtest.NewCA(t)
	ub := upstreamtest.StartUnbound(t, needTool(t, "unbound"), ca)
	wrong := dohURL(ub.DoH, "/dns-query", "wrong.test")
	right := dohURL(ub.DoH, "/dns-query", "localhost")
	other := upstreamtest.NewCA(t) // ca_file names a CA that did not sign unbound's certificate
	for _, c := range []struct {
		name, caFile, server string
	}{
		{"wrong name", ca.PEMFile(t, t.TempDir()), wrong},
		{"untrusted", other.PEMFile(t, t.TempDir()), right},
	} {
		d := startDohfwd(t, encryptedYAML(c.caFile, []string{"enc.test"}, []string{c.server}), newPKI(t))
		out := runTool(t, "kdig", d.digArgs("+https", "x.enc.test", "A")...)
		if !strings.Contains(out, "SERVFAIL") || !strings.Contains(out, c.server) {
			t.Fatalf("%s: want SERVFAIL with an EDE naming %s:\n%s", c.name, c.server, out)
		}
		for _, ev := range d.eventsAtLeast(1, func(ev map[string]any) bool { return ev["message"] == "attempt" }) {
			if ev["transport"] != "doh" || ev["outcome"] != "handshake_error" || ev["class"] != "tls" || ev["demoted"] != true {
				t.Fatalf("%s: attempt %v: want a demoting handshake_error of class tls over doh", c.name, ev)
			}
		}
	}
}

// fakeDoH is a Go HTTP/2 server with a certificate from ca, its handler
// h; idle, when set, is its idle timeout.
func fakeDoH(t *testing.T, ca *upstreamtest.CA, idle time.Duration, h http.HandlerFunc) (addr string, conns func() int) {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = true
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Leaf(t, time.Now().Add(time.Hour), "localhost", "127.0.0.1")}}
	srv.Config.IdleTimeout = idle
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	var mu sync.Mutex
	n := 0
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			mu.Lock()
			n++
			mu.Unlock()
		}
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String(), func() int { mu.Lock(); defer mu.Unlock(); return n }
}

// dohAnswer answers a DoH POST with name A 192.0.2.7.
func dohAnswer(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var q dns.Msg
	if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/dns-message" || q.Unpack(body) != nil || len(q.Question) != 1 {
		http.Error(w, "not a DoH POST", 400)
		return
	}
	m := new(dns.Msg).SetReply(&q)
	rr, _ := dns.NewRR(q.Question[0].Name + " 60 IN A 192.0.2.7")
	m.Answer = append(m.Answer, rr)
	b, _ := m.Pack()
	w.Header().Set("Content-Type", "application/dns-message")
	w.Write(b)
}

// A DoH server answering 500, 415 or an HTML page with status 200: each
// attempt fails with class http and demotes, never passes the page on as
// an answer; the right path on the same server answers.
func TestUpstreamDoHHTTPRefusals(t *testing.T) {
	t.Parallel()
	ca := upstreamtest.NewCA(t)
	addr, _ := fakeDoH(t, ca, 0, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/500":
			http.Error(w, "internal error", 500)
		case "/415":
			http.Error(w, "unsupported media type", 415)
		case "/html":
			w.Header().Set("Content-Type", "text/html")
			w.Write([]byte("<html>captive portal</html>"))
		default:
			dohAnswer(w, r)
		}
	})
	paths := []string{"/500", "/415", "/html", "/dns-query"}
	var domains, servers []string
	for i, p := range paths {
		domains = append(domains, fmt.Sprintf("p%d.test", i))
		servers = append(servers, dohURL(addr, p, "localhost"))
	}
	d := startDohfwd(t, encryptedYAML(ca.PEMFile(t, t.TempDir()), domains, servers), newPKI(t))
	c := d.client()
	for i := range paths {
		_, r := d.query(c, newQuery(fmt.Sprintf("x.p%d.test", i), dns.TypeA))
		want := dns.RcodeServerFailure
		if paths[i] == "/dns-query" {
			want = dns.RcodeSuccess
		}
		if r.Rcode != want {
			t.Fatalf("%s: rcode %s, want %s", paths[i], dns.RcodeToString[r.Rcode], dns.RcodeToString[want])
		}
	}
	for i, p := range paths[:3] {
		scope := fmt.Sprintf("s%d", i)
		for _, ev := range d.eventsAtLeast(1, func(ev map[string]any) bool { return ev["message"] == "attempt" && ev["scope"] == scope }) {
			if ev["outcome"] != "recv_error" || ev["class"] != "http" || ev["demoted"] != true {
				t.Fatalf("%s: attempt %v: want a demoting recv_error of class http", p, ev)
			}
		}
	}
}

// A server that closes idle connections (Go's, after 300 ms): the next
// question opens a new connection, resuming the TLS session, and is
// answered at its first attempt. A server stalling its handshake fails
// its attempt at the 2 s deadline (a timeout, demoting it) and the next
// server answers within the question.
func TestUpstreamDoHIdleCloseAndStall(t *testing.T) {
	t.Parallel()
	ca := upstreamtest.NewCA(t)
	addr, conns := fakeDoH(t, ca, 300*time.Millisecond, dohAnswer)
	stall := upstreamtest.StartStallingTLS(t)
	yaml := encryptedYAML(ca.PEMFile(t, t.TempDir()), []string{"idle.test"}, []string{dohURL(addr, "/dns-query", "localhost")})
	yaml = strings.Replace(yaml, "scopes:\n", fmt.Sprintf("scopes:\n  - name: stall\n    domains: [stall.test]\n    servers: [%q, %q]\n",
		dohURL(stall.String(), "/dns-query", "localhost"), dohURL(addr, "/dns-query", "localhost")), 1)
	d := startDohfwd(t, yaml, newPKI(t))
	c := d.client()
	for i := range 2 {
		if _, r := d.query(c, newQuery(fmt.Sprintf("q%d.idle.test", i), dns.TypeA)); r.Rcode != dns.RcodeSuccess {
			t.Fatalf("question %d: %s", i, dns.RcodeToString[r.Rcode])
		}
		time.Sleep(time.Second) // past the server's idle timeout
	}
	evs := d.eventsAtLeast(2, func(ev map[string]any) bool { return ev["message"] == "attempt" && ev["scope"] == "s0" })
	if evs[0]["conn"] != "new" || evs[1]["conn"] != "resumed" || evs[1]["attempt"].(float64) != 1 || conns() != 2 {
		t.Fatalf("after the server's idle close: %v then %v on %d connections, want new then resumed on 2", evs[0], evs[1], conns())
	}

	if _, r := d.query(c, newQuery("x.stall.test", dns.TypeA)); r.Rcode != dns.RcodeSuccess {
		t.Fatalf("stall scope: %s, want the second server's answer", dns.RcodeToString[r.Rcode])
	}
	evs = d.eventsAtLeast(2, func(ev map[string]any) bool { return ev["message"] == "attempt" && ev["scope"] == "stall" })
	// A stall is a timeout, as over DoT (engine.TestDoTHandshakeStall);
	// no connection was reached, so the event has no conn.
	if evs[0]["outcome"] != "timeout" || evs[0]["class"] != "timeout" || evs[0]["conn"] != nil || evs[0]["demoted"] != true || evs[1]["outcome"] != "answer" {
		t.Fatalf("stall: %v then %v: want a demoting timeout, then the answer", evs[0], evs[1])
	}
}

// Many questions in flight to one DoH server (unbound allows 100 streams
// a connection): all answered, over at most upstream_tls.max_connections
// connections.
func TestUpstreamDoHManyInFlightBounded(t *testing.T) {
	t.Parallel()
	ca := upstreamtest.NewCA(t)
	ub := upstreamtest.StartUnbound(t, needTool(t, "unbound"), ca)
	yaml := encryptedYAML(ca.PEMFile(t, t.TempDir()), []string{"enc.test"}, []string{dohURL(ub.DoH, "/dns-query", "localhost")})
	yaml = strings.Replace(yaml, "upstream_tls:\n", "upstream_tls:\n  max_connections: 2\n", 1)
	yaml += "cache:\n  max_entries: 0\n"
	d := startDohfwd(t, yaml, newPKI(t))
	c := d.client()
	const n = 1500
	var wg sync.WaitGroup
	var mu sync.Mutex
	bad := 0
	for i := range n {
		wg.Go(func() {
			// Not d.query: its Fatal may not run on this goroutine.
			wire, _ := newQuery(fmt.Sprintf("q%d.enc.test", i), dns.TypeA).Pack()
			var r dns.Msg
			res, err := c.Post(d.URL(), "application/dns-message", bytes.NewReader(wire))
			if err == nil {
				body, _ := io.ReadAll(res.Body)
				res.Body.Close()
				err = r.Unpack(body)
			}
			if err != nil || r.Rcode != dns.RcodeSuccess {
				mu.Lock()
				bad++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	cs := serverStatus(t, d, 0)["connections"].(map[string]any)
	if bad != 0 || cs["handshakes"].(float64) > 2 || cs["open"].(float64) > 2 {
		t.Fatalf("%d of %d unanswered; connections %v: want all answered over at most 2", bad, n, cs)
	}
}
