package main

import (
	"fmt"
	"net"
	"regexp"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// The plain DNS listener (UDP and TCP) answers from the same engine as
// DoH, and _dns.resolver.arpa SVCB, asked with dig and kdig over plain
// DNS and over DoT, names the DoH and DoT listeners at their ports
// (RFC 9462).
func TestPlainDNSAndDDRWithDigAndKdig(t *testing.T) {
	t.Parallel()
	yaml := strings.Replace(scopeYAML(startNSD(t)), "listen:\n", "listen:\n  dot: 127.0.0.1:0\n  doq: 127.0.0.1:0\n  dns: 127.0.0.1:0\n", 1) +
		"ddr:\n  names: [dns.e2e.test]\n  addresses: [127.0.0.1]\n"
	d := startDohfwd(t, yaml, newPKI(t))
	dot, udp, tcp := d.listenerAddr("dot"), d.listenerAddr("dns-udp"), d.listenerAddr("dns-tcp")
	if udp != tcp {
		t.Fatalf("UDP on %s, TCP on %s: want one address", udp, tcp)
	}
	host, port, _ := net.SplitHostPort(udp)
	_, dohPort, _ := net.SplitHostPort(d.HTTPS)
	_, dotPort, _ := net.SplitHostPort(dot)
	_, doqPort, _ := net.SplitHostPort(d.listenerAddr("doq"))

	for _, transport := range []string{"+notcp", "+tcp"} {
		out := runTool(t, "dig", "@"+host, "-p", port, transport, "www.e2e.test", "A", "+noall", "+answer", "+comments")
		if !strings.Contains(out, "status: NOERROR") || !strings.Contains(out, "www.e2e.test.\t\t3600\tIN\tA\t127.0.0.1") {
			t.Errorf("dig %s:\n%s", transport, out)
		}
	}

	// HTTP/3 on the DoH port (its UDP twin) adds h3 to the DoH alpn.
	alpn := "h2"
	if d.http3Addr() == d.HTTPS {
		alpn = "h2,h3"
	}
	wantDoH := regexp.MustCompile(`1 dns\.e2e\.test\. alpn="?` + alpn + `"? port=` + dohPort + ` ipv4hint=127\.0\.0\.1 (key7|dohpath)="?/dns-query\{\?dns\}"?`)
	wantDoT := regexp.MustCompile(`2 dns\.e2e\.test\. alpn="?dot"? port=` + dotPort + ` ipv4hint=127\.0\.0\.1`)
	wantDoQ := regexp.MustCompile(`3 dns\.e2e\.test\. alpn="?doq"? port=` + doqPort + ` ipv4hint=127\.0\.0\.1`)
	check := func(how, out string) {
		t.Helper()
		if !strings.Contains(out, "NOERROR") || !wantDoH.MatchString(out) || !wantDoT.MatchString(out) || !wantDoQ.MatchString(out) {
			t.Errorf("%s:\n%s", how, out)
		}
	}
	check("dig", runTool(t, "dig", "@"+host, "-p", port, "_dns.resolver.arpa", "SVCB"))
	check("kdig", runTool(t, "kdig", "@"+host, "-p", port, "_dns.resolver.arpa", "SVCB"))
	dotHost, _, _ := net.SplitHostPort(dot)
	check("kdig +tls", runTool(t, "kdig", "@"+dotHost, "-p", dotPort, "+tls-ca="+d.pki.CA, "+tls-hostname=localhost",
		"_dns.resolver.arpa", "SVCB"))

	// Over DoH too, read as a message: the SVCB parameters themselves.
	_, m := d.query(d.client(), newQuery("_dns.resolver.arpa", dns.TypeSVCB))
	if m == nil || len(m.Answer) != 3 {
		t.Fatalf("DoH: %v", m)
	}
	for i, want := range []string{
		fmt.Sprintf(`alpn="%s" port="%s" ipv4hint="127.0.0.1" dohpath="/dns-query{?dns}"`, alpn, dohPort),
		fmt.Sprintf(`alpn="dot" port="%s" ipv4hint="127.0.0.1"`, dotPort),
		fmt.Sprintf(`alpn="doq" port="%s" ipv4hint="127.0.0.1"`, doqPort),
	} {
		var kv []string
		for _, v := range m.Answer[i].(*dns.SVCB).Value {
			kv = append(kv, fmt.Sprintf("%s=%q", v.Key(), v.String()))
		}
		if got := strings.Join(kv, " "); got != want {
			t.Errorf("DoH record %d: %s, want %s", i, got, want)
		}
	}
}
