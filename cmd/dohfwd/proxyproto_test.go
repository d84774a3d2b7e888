package main

import (
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// proxyYAML runs dohfwd on nsd with both DoH listeners behind a balancer
// at 127.0.0.2 that speaks PROXY protocol.
func proxyYAML(nsd string) string {
	return strings.Replace(scopeYAML(nsd), "listen:\n  https: 127.0.0.1:0\n",
		"listen:\n  https: 127.0.0.1:0\n  http: 127.0.0.1:0\n  proxy_protocol: [127.0.0.2/32]\n", 1) +
		"  level: debug\n"
}

// curl --haproxy-protocol (v1) from the balancer's address is served on
// both listeners; the same curl without the header, or with it from an
// address that is not a balancer, is refused.
func TestProxyProtocolWithCurlOnBothListeners(t *testing.T) {
	t.Parallel()
	needTool(t, "curl")
	d := startDohfwd(t, proxyYAML(startNSD(t)), newPKI(t))
	q := newQuery("www.e2e.test.", dns.TypeA)
	wire, _ := q.Pack()
	for _, base := range []string{"https://localhost:" + port(d.HTTPS), "http://127.0.0.1:" + port(d.HTTP)} {
		u := base + "/dns-query?dns=" + base64.RawURLEncoding.EncodeToString(wire)
		curl := func(from string, header bool) error {
			args := []string{"-sS", "--fail", "--max-time", "5", "--cacert", d.pki.CA, "--interface", from,
				"--resolve", "localhost:" + port(d.HTTPS) + ":127.0.0.1", "-o", "/dev/null", u}
			if header {
				args = append([]string{"--haproxy-protocol"}, args...)
			}
			out, err := exec.Command("curl", args...).CombinedOutput()
			if err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		}
		if err := curl("127.0.0.2", true); err != nil {
			t.Errorf("%s: curl --haproxy-protocol from the balancer: %v", base, err)
		}
		if err := curl("127.0.0.2", false); err == nil {
			t.Errorf("%s: the balancer's connection without a header was served", base)
		}
		if err := curl("127.0.0.1", true); err == nil {
			t.Errorf("%s: a header from a peer that is not a balancer was believed", base)
		}
		if err := curl("127.0.0.1", false); err != nil {
			t.Errorf("%s: a direct client without a header: %v", base, err)
		}
	}
	d.waitEvent(5*time.Second, func(ev map[string]any) bool {
		return ev["message"] == "connection refused: PROXY protocol header" && strings.HasPrefix(ev["peer"].(string), "127.0.0.2:")
	})
}

// The client address in a v2 header is the one dohfwd's logs report.
func TestProxyProtocolClientAddressReachesTheLogs(t *testing.T) {
	t.Parallel()
	d := startDohfwd(t, proxyYAML(startNSD(t)), newPKI(t))
	c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: 2 * time.Second}).Dial("tcp", d.HTTP)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// v2 PROXY TCP6 from [2001:db8::53]:40053 to [2001:db8::1]:443.
	hdr := []byte("\r\n\r\n\x00\r\nQUIT\n\x21\x21\x00\x24")
	hdr = append(hdr, net.ParseIP("2001:db8::53")...)
	hdr = append(hdr, net.ParseIP("2001:db8::1")...)
	hdr = append(hdr, 40053>>8, 40053&0xff, 443>>8, 443&0xff)
	c.Write(hdr)
	// A bad request: its debug event names the client.
	fmt.Fprintf(c, "GET /dns-query?dns=!!! HTTP/1.1\r\nHost: doh.test\r\n\r\n")
	ev := d.waitEvent(5*time.Second, func(ev map[string]any) bool { return ev["message"] == "bad request" })
	if ev["client"] != "2001:db8::53" {
		t.Errorf("bad request logged with client %v, want 2001:db8::53 from the PROXY header", ev["client"])
	}
}

func port(hostPort string) string {
	_, p, _ := net.SplitHostPort(hostPort)
	return p
}

// The DoT listener takes PROXY protocol like the DoH listeners: a v1
// header from the balancer is believed and the TLS session behind it
// answered; the balancer without a header is refused.
func TestProxyProtocolOnDoT(t *testing.T) {
	t.Parallel()
	yaml := strings.Replace(proxyYAML(startNSD(t)), "listen:\n", "listen:\n  dot: 127.0.0.1:0\n", 1)
	d := startDohfwd(t, yaml, newPKI(t))
	dot := d.listenerAddr("dot")
	exchange := func(header string) (*dns.Msg, error) {
		raw, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: 2 * time.Second}).Dial("tcp", dot)
		if err != nil {
			return nil, err
		}
		defer raw.Close()
		raw.SetDeadline(time.Now().Add(5 * time.Second))
		if header != "" {
			if _, err := raw.Write([]byte(header)); err != nil {
				return nil, err
			}
		}
		c := &dns.Conn{Conn: tls.Client(raw, &tls.Config{RootCAs: d.pki.Pool, ServerName: "localhost", NextProtos: []string{"dot"}})}
		if err := c.WriteMsg(newQuery("www.e2e.test.", dns.TypeA)); err != nil {
			return nil, err
		}
		return c.ReadMsg()
	}
	m, err := exchange("PROXY TCP4 192.0.2.7 127.0.0.1 40053 853\r\n")
	if err != nil || m.Rcode != dns.RcodeSuccess || len(m.Answer) == 0 {
		t.Fatalf("DoT behind a PROXY v1 header: %v, %v", m, err)
	}
	if _, err := exchange(""); err == nil {
		t.Error("the balancer's DoT connection without a header was served")
	}
}
