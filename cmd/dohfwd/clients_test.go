package main

import (
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// startOnNSD runs dohfwd with a certificate from a fresh test CA,
// forwarding every name to nsd.
func startOnNSD(t *testing.T) *dohfwd {
	t.Helper()
	return startDohfwd(t, scopeYAML(startNSD(t)), newPKI(t))
}

// digArgs are the arguments, the same for dig and kdig, of a query to d's
// HTTPS listener that verifies its certificate, followed by more.
func (d *dohfwd) digArgs(more ...string) []string {
	host, port, _ := net.SplitHostPort(d.HTTPS)
	return append([]string{"@" + host, "-p", port, "+tls-ca=" + d.pki.CA, "+tls-hostname=localhost"}, more...)
}

// A page on a name that only the test upstream knows loads through
// curl --doh-url: DoH works end to end, with the certificate verified.
func TestCurlDoHURLFetchesPageByUpstreamOnlyName(t *testing.T) {
	t.Parallel()
	d := startOnNSD(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	page := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s", r.Host)
	})}
	go page.Serve(ln)
	t.Cleanup(func() { page.Close() })
	port := ln.Addr().(*net.TCPAddr).Port

	url := fmt.Sprintf("http://www.e2e.test:%d/", port)
	out := runTool(t, "curl", "-sS", "--fail", "--max-time", "20", "--cacert", d.pki.CA, "--doh-url", d.URL(), url)
	if want := fmt.Sprintf("hello from www.e2e.test:%d", port); out != want {
		t.Fatalf("page %q, want %q", out, want)
	}
}

func TestDigOverHTTPS(t *testing.T) {
	t.Parallel()
	d := startOnNSD(t)
	for _, mode := range []string{"+https", "+https-get"} {
		out := runTool(t, "dig", d.digArgs(mode, "www.e2e.test", "A", "+noall", "+answer", "+comments")...)
		if !strings.Contains(out, "status: NOERROR") || !strings.Contains(out, "www.e2e.test.\t\t3600\tIN\tA\t127.0.0.1") {
			t.Errorf("dig %s:\n%s", mode, out)
		}
	}
}

// kdig over HTTP/2 POST; kdig pads its query (RFC 8467), so the answer
// comes padded to a multiple of 468 bytes.
func TestKdigOverHTTPS(t *testing.T) {
	t.Parallel()
	d := startOnNSD(t)
	out := runTool(t, "kdig", d.digArgs("+https", "v6.e2e.test", "AAAA")...)
	if !strings.Contains(out, "status: NOERROR") || !strings.Contains(out, "2001:db8::1") || !strings.Contains(out, "HTTP session (HTTP/2-POST)") || !strings.Contains(out, "Received 468 B") {
		t.Errorf("kdig:\n%s", out)
	}
}

// Raw RFC 8484 GET and POST and the JSON form, with curl over HTTP/2.
func TestCurlRawGetPostAndJSON(t *testing.T) {
	t.Parallel()
	d := startOnNSD(t)
	pki := d.pki
	q := newQuery("www.e2e.test", dns.TypeA)
	q.Id = 0
	wire, _ := q.Pack()
	dir := t.TempDir()

	check := func(how, file string) {
		t.Helper()
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		m := new(dns.Msg)
		if err := m.Unpack(b); err != nil {
			t.Fatalf("%s: answer does not parse: %v", how, err)
		}
		if m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 || m.Answer[0].(*dns.A).A.String() != "127.0.0.1" || m.Id != 0 {
			t.Fatalf("%s: %v", how, m)
		}
	}
	get := filepath.Join(dir, "get.bin")
	out := runTool(t, "curl", "-sS", "--fail", "--http2", "--cacert", pki.CA, "-H", "accept: application/dns-message",
		"-o", get, "-w", "%{http_version} %{content_type}", d.URL()+"?dns="+base64.RawURLEncoding.EncodeToString(wire))
	if out != "2 application/dns-message" {
		t.Errorf("GET: %q", out)
	}
	check("GET", get)

	qfile, post := filepath.Join(dir, "q.bin"), filepath.Join(dir, "post.bin")
	os.WriteFile(qfile, wire, 0o644)
	runTool(t, "curl", "-sS", "--fail", "--cacert", pki.CA, "-H", "content-type: application/dns-message",
		"--data-binary", "@"+qfile, "-o", post, d.URL())
	check("POST", post)

	js := runTool(t, "curl", "-sS", "--fail", "--cacert", pki.CA, "https://"+d.HTTPS+"/resolve?name=www.e2e.test&type=A")
	if !strings.Contains(js, `"Status":0`) || !strings.Contains(js, `"data":"127.0.0.1"`) {
		t.Errorf("JSON /resolve: %s", js)
	}
	js = runTool(t, "curl", "-sS", "--fail", "--cacert", pki.CA, "-H", "accept: application/dns-json",
		d.URL()+"?name=v6.e2e.test&type=28")
	if !strings.Contains(js, `"Status":0`) || !strings.Contains(js, `"data":"2001:db8::1"`) {
		t.Errorf("JSON with Accept: %s", js)
	}
}
