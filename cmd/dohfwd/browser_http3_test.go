package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/dohfwd/dohfwd/engine/upstreamtest"
)

// Chromium in secure DoH mode, with QUIC forced on dohfwd's origin, loads
// a page on a name only the test upstream knows: its DoH questions go
// over HTTP/3 (dohfwd's events say proto h3), with the certificate
// verified against the test CA.
func TestChromiumResolvesOverHTTP3(t *testing.T) {
	t.Parallel()
	chromium := needBrowserTool(t, "chromium")
	certutil := needBrowserTool(t, "certutil")

	domain := "h3-" + randomHex(t, 6) + ".test."
	needTool(t, "nsd")
	upstream := upstreamtest.StartNSD(t, upstreamtest.Zone{Origin: domain, Text: fmt.Sprintf(`$ORIGIN %[1]s
$TTL 300
@ IN SOA ns.%[1]s admin.%[1]s 1 3600 600 86400 120
@ IN NS ns
ns IN A 127.0.0.1
chromium IN A 127.0.0.1
`, domain)})
	pki := newPKI(t)
	// One port for TCP and UDP: Chromium forces QUIC on the origin's own
	// port.
	port := freePort(t)
	yaml := strings.Replace(scopeYAML(upstream), "https: 127.0.0.1:0", fmt.Sprintf("https: 127.0.0.1:%d", port), 1)
	d := startDohfwd(t, yaml, pki)
	if got := d.http3Addr(); got != d.HTTPS {
		t.Fatalf("HTTP/3 on %s, HTTPS on %s: want one port", got, d.HTTPS)
	}
	pages := startPageServer(t)

	host := "chromium." + strings.TrimSuffix(domain, ".")
	token := chromiumLoads(t, chromium, certutil, d, pages, host, "--enable-quic", "--origin-to-force-quic-on="+d.HTTPS)
	pages.mustHaveServed(t, host, token)
	qname := host + "."
	if evs := d.Events(func(ev map[string]any) bool {
		return ev["message"] == "question" && ev["qname"] == qname && ev["result"] == "answer" && ev["proto"] == "h3"
	}); len(evs) == 0 {
		t.Fatalf("no question for %s answered over HTTP/3; its questions: %v", qname,
			d.Events(func(ev map[string]any) bool { return ev["message"] == "question" && ev["qname"] == qname }))
	}
}
