package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/engine/upstreamtest"
)

// EDNS Client Subnet (RFC 7871) on every front end: a client's ECS option
// never reaches an upstream of a scope with the default policy (strip),
// and no answer carries one back; a scope with ecs: pass sends it on.
func TestECSNotLeakedOnAnyFrontEnd(t *testing.T) {
	t.Parallel()
	up := upstreamtest.Start(t, func(q upstreamtest.Query) upstreamtest.Action {
		a := upstreamtest.Answer("@ 60 IN A 192.0.2.1")(q)
		if q.Msg != nil && len(a.Replies) > 0 {
			// A server that answers with a subnet of its own: the
			// client must not see it either.
			ecs := &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: 24, SourceScope: 24, Address: net.IPv4(198, 51, 100, 0)}
			if o := a.Replies[0].Msg.IsEdns0(); o != nil {
				o.Option = append(o.Option, ecs)
			}
		}
		return a
	})
	yaml := fmt.Sprintf(`listen:
  https: 127.0.0.1:0
  http: 127.0.0.1:0
  dot: 127.0.0.1:0
  dns: 127.0.0.1:0
  doq: 127.0.0.1:0
  admin: 127.0.0.1:0
scopes:
  - name: strip
    default_route: true
    servers: [%[1]s]
  - name: pass
    domains: [pass.test]
    servers: [%[1]s]
    ecs: pass
fallback_servers: [127.0.0.1:1]
log:
  format: json
`, up)
	d := startDohfwd(t, yaml, newPKI(t))
	fronts := digFronts(d)
	for i, f := range fronts {
		host, port, _ := net.SplitHostPort(d.listenerAddr(f.listener))
		for _, zone := range []string{"e2e.test", "pass.test"} {
			name := fmt.Sprintf("ecs%d.%s", i, zone)
			args := append([]string{"@" + host, "-p", port, "+tries=1", "+timeout=5", "+subnet=203.0.113.0/24"}, f.args...)
			out := runTool(t, "dig", append(args, name, "A")...)
			if !strings.Contains(out, "status: NOERROR") || !strings.Contains(out, "192.0.2.1") {
				t.Fatalf("%s %s: not answered:\n%s", f.listener, name, out)
			}
			if strings.Contains(out, "CLIENT-SUBNET") {
				t.Fatalf("%s %s: the answer carries an ECS option:\n%s", f.listener, name, out)
			}
			sent := upstreamECS(t, up, name)
			if zone == "e2e.test" && sent != "" {
				t.Fatalf("%s %s: the client's subnet reached the upstream: %s", f.listener, name, sent)
			}
			if zone == "pass.test" && !strings.HasPrefix(sent, "203.0.113.0/24") {
				t.Fatalf("%s %s: ecs: pass sent %q upstream, want the client's 203.0.113.0/24", f.listener, name, sent)
			}
		}
	}
	// DoQ (RFC 9250), with quic-go as the client.
	conn := dialDoQ(t, d, d.listenerAddr("doq"))
	for _, zone := range []string{"e2e.test", "pass.test"} {
		name := "doq." + zone
		m, err := askDoQ(conn, doqFrame(withSubnet(newQuery(name, dns.TypeA)), 0))
		if err != nil || m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 {
			t.Fatalf("doq %s: %v %v", name, m, err)
		}
		if o := m.IsEdns0(); o != nil && strings.Contains(o.String(), "SUBNET") {
			t.Fatalf("doq %s: the answer carries an ECS option:\n%v", name, m)
		}
		sent := upstreamECS(t, up, name)
		if zone == "e2e.test" && sent != "" || zone == "pass.test" && !strings.HasPrefix(sent, "203.0.113.0/24") {
			t.Fatalf("doq %s: sent %q upstream", name, sent)
		}
	}
}

// withSubnet is q with EDNS and an ECS option for 203.0.113.0/24.
func withSubnet(q *dns.Msg) *dns.Msg {
	q.SetEdns0(1232, false)
	o := q.IsEdns0()
	o.Option = append(o.Option, &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: 24, Address: net.IPv4(203, 0, 113, 0)})
	return q
}

// upstreamECS is the ECS option of the upstream's query for name, as
// address/source-prefix, or "" when it had none.
func upstreamECS(t *testing.T, up *upstreamtest.Server, name string) string {
	t.Helper()
	for _, q := range up.Queries() {
		if q.Msg == nil || !strings.EqualFold(q.Msg.Question[0].Name, name+".") {
			continue
		}
		if o := q.Msg.IsEdns0(); o != nil {
			for _, opt := range o.Option {
				if s, ok := opt.(*dns.EDNS0_SUBNET); ok {
					return fmt.Sprintf("%s/%d", s.Address, s.SourceNetmask)
				}
			}
		}
		return ""
	}
	t.Fatalf("the upstream was not asked %s", name)
	return ""
}

// ecsAddUpstream answers with the query's ECS option echoed, at scope
// prefix 24 (the answer is for that /24 only).
func ecsAddUpstream(t *testing.T) *upstreamtest.Server {
	return upstreamtest.Start(t, func(q upstreamtest.Query) upstreamtest.Action {
		a := upstreamtest.Answer("@ 60 IN A 192.0.2.1")(q)
		if q.Msg != nil && len(a.Replies) > 0 {
			if o := q.Msg.IsEdns0(); o != nil {
				for _, opt := range o.Option {
					if s, ok := opt.(*dns.EDNS0_SUBNET); ok {
						echo := *s
						echo.SourceScope = 24
						r := a.Replies[0].Msg.IsEdns0()
						r.Option = append(r.Option, &echo)
					}
				}
			}
		}
		return a
	})
}

// ecs: add sends the client's subnet from every front end: the peer's
// address cut to /24, or the address a trusted X-Forwarded-For or a PROXY
// protocol header gives (cut to /56 for IPv6). The client's own ECS
// option is not what is sent, and no answer carries one back. An answer
// for a /24 serves that /24 from the cache, and another /24 is asked
// again.
func TestECSAddOnEveryFrontEnd(t *testing.T) {
	t.Parallel()
	up := ecsAddUpstream(t)
	yaml := fmt.Sprintf(`listen:
  https: 127.0.0.1:0
  http: 127.0.0.1:0
  dot: 127.0.0.1:0
  dns: 127.0.0.1:0
  doq: 127.0.0.1:0
  admin: 127.0.0.1:0
  trusted_proxies: [127.0.0.3/32]
  proxy_protocol: [127.0.0.2/32]
scopes:
  - name: add
    default_route: true
    servers: [%s]
    ecs: add
fallback_servers: [127.0.0.1:1]
log:
  format: json
`, up)
	d := startDohfwd(t, yaml, newPKI(t))
	fronts := digFronts(d)
	for i, f := range fronts {
		host, port, _ := net.SplitHostPort(d.listenerAddr(f.listener))
		name := fmt.Sprintf("add%d.e2e.test", i)
		args := append([]string{"@" + host, "-p", port, "-b", "127.0.0.1", "+tries=1", "+timeout=5", "+subnet=203.0.113.0/24"}, f.args...)
		out := runTool(t, "dig", append(args, name, "A")...)
		if !strings.Contains(out, "status: NOERROR") || strings.Contains(out, "CLIENT-SUBNET") {
			t.Fatalf("%s: want an answer without ECS:\n%s", f.listener, out)
		}
		if sent := upstreamECS(t, up, name); sent != "127.0.0.0/24" {
			t.Fatalf("%s: sent %q upstream, want the client's 127.0.0.0/24", f.listener, sent)
		}
	}

	qc := dialDoQ(t, d, d.listenerAddr("doq"))
	if m, err := askDoQ(qc, doqFrame(withSubnet(newQuery("doq.e2e.test", dns.TypeA)), 0)); err != nil || m.Rcode != dns.RcodeSuccess {
		t.Fatalf("doq: %v %v", m, err)
	}
	if sent := upstreamECS(t, up, "doq.e2e.test"); sent != "127.0.0.0/24" {
		t.Fatalf("doq: sent %q upstream, want the client's 127.0.0.0/24", sent)
	}

	// The cache: the same /24 is answered from it, another /24 is asked.
	host, port, _ := net.SplitHostPort(d.listenerAddr("dns-udp"))
	asked := func(name string) int {
		n := 0
		for _, q := range up.Queries() {
			if q.Msg != nil && strings.EqualFold(q.Msg.Question[0].Name, name+".") {
				n++
			}
		}
		return n
	}
	for i, from := range []string{"127.0.0.1", "127.0.0.9", "127.0.1.1"} {
		out := runTool(t, "dig", "@"+host, "-p", port, "-b", from, "+tries=1", "+timeout=5", "cached.e2e.test", "A")
		if !strings.Contains(out, "status: NOERROR") {
			t.Fatalf("from %s:\n%s", from, out)
		}
		if want := []int{1, 1, 2}[i]; asked("cached.e2e.test") != want {
			t.Fatalf("after the question from %s the upstream was asked %d times, want %d", from, asked("cached.e2e.test"), want)
		}
	}

	// A trusted proxy's X-Forwarded-For names the client.
	c := d.clientFrom("127.0.0.3")
	req := newQuery("xff.e2e.test.", dns.TypeA)
	wire, _ := req.Pack()
	hreq, _ := http.NewRequest("POST", d.URL(), bytes.NewReader(wire))
	hreq.Header.Set("content-type", "application/dns-message")
	hreq.Header.Set("x-forwarded-for", "198.51.100.77")
	res, err := c.Do(hreq)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("DoH through the trusted proxy: %v %v", res, err)
	}
	res.Body.Close()
	if sent := upstreamECS(t, up, "xff.e2e.test"); sent != "198.51.100.0/24" {
		t.Fatalf("X-Forwarded-For: sent %q upstream, want 198.51.100.0/24", sent)
	}

	// A PROXY protocol v2 header from the balancer names the client.
	conn, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: 2 * time.Second}).Dial("tcp", d.HTTP)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hdr := []byte("\r\n\r\n\x00\r\nQUIT\n\x21\x21\x00\x24")
	hdr = append(hdr, net.ParseIP("2001:db8:aa:bb::53")...)
	hdr = append(hdr, net.ParseIP("2001:db8::1")...)
	hdr = append(hdr, 40053>>8, 40053&0xff, 443>>8, 443&0xff)
	conn.Write(hdr)
	pq := newQuery("proxied.e2e.test.", dns.TypeA)
	pwire, _ := pq.Pack()
	fmt.Fprintf(conn, "GET /dns-query?dns=%s HTTP/1.1\r\nHost: doh.test\r\n\r\n", base64.RawURLEncoding.EncodeToString(pwire))
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	pres, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || pres.StatusCode != http.StatusOK {
		t.Fatalf("DoH behind PROXY protocol: %v %v", pres, err)
	}
	if sent := upstreamECS(t, up, "proxied.e2e.test"); sent != "2001:db8:aa::/56" {
		t.Fatalf("PROXY protocol: sent %q upstream, want 2001:db8:aa::/56", sent)
	}
}

// digFront is one of dohfwd's listeners and the dig options that ask
// through it.
type digFront struct {
	listener string
	args     []string
}

// digFronts are the listeners dig can ask: DoH over TLS and plain HTTP,
// DoT, Do53 over UDP and TCP (DoQ is kdig's).
func digFronts(d *dohfwd) []digFront {
	tls := []string{"+tls-ca=" + d.pki.CA, "+tls-hostname=localhost"}
	return []digFront{
		{"https", append([]string{"+https"}, tls...)},
		{"http", []string{"+http-plain"}},
		{"dot", append([]string{"+tls"}, tls...)},
		{"dns-udp", []string{"+notcp"}},
		{"dns-tcp", []string{"+tcp"}},
	}
}
