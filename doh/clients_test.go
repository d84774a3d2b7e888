//go:build !wasip1

package doh

import (
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dohfwd/dohfwd/scripts/testtool"
)

// needTool finds a real client or skips loudly: `make test` installs them
// (curl is on every machine; kdig from knot-dnsutils, dig from
// bind9-dnsutils).
func needTool(t *testing.T, name string) string {
	t.Helper()
	return testtool.Find(t, name, "`make test` installs it (scripts/setup.d)")
}

func writeCA(t *testing.T) string {
	cert, _ := testCert()
	p := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestCurlDoHURL: curl resolves a name that only the test upstream knows
// through our DoH server (engine, real sockets) and fetches a page there.
func TestCurlDoHURL(t *testing.T) {
	t.Parallel()
	curl := needTool(t, "curl")
	_, base, _, seen := startEngine(t)
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello through DoH")
	}))
	t.Cleanup(web.Close)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(web.URL, "http://"))
	out, err := exec.Command(curl, "-sS", "--max-time", "10", "--cacert", writeCA(t),
		"--doh-url", base+DefaultPath, "http://web.example.test:"+port+"/").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "hello through DoH") {
		t.Fatalf("curl: %v: %s", err, out)
	}
	if x := seen.last(t); !x.Resolved || x.Proto != "HTTP/2.0" {
		t.Errorf("curl's DoH request: %+v", x)
	}
}

// TestKdigAndDig: kdig +https (HTTP/2 POST) and dig +https-get ask through
// the server and get the upstream's answer.
func TestKdigAndDig(t *testing.T) {
	t.Parallel()
	_, base, _, _ := startEngine(t)
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(base, "https://"))
	ca := writeCA(t)
	for _, tc := range []struct {
		tool string
		args []string
	}{
		{"kdig", []string{"@" + host, "-p", port, "+https=" + DefaultPath, "+tls-ca=" + ca, "+timeout=5", "www.example.test", "A"}},
		{"dig", []string{"@" + host, "-p", port, "+https-get=" + DefaultPath, "+tls-ca=" + ca, "+timeout=5", "+tries=1", "www.example.test", "A"}},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			out, err := exec.Command(needTool(t, tc.tool), tc.args...).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "192.0.2.2") || !strings.Contains(string(out), "NOERROR") {
				t.Fatalf("%s: %v:\n%s", tc.tool, err, out)
			}
		})
	}
}
