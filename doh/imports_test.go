package doh

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestDoHLinksNoMiekg keeps miekg/dns (and the crypto/tls it brings) out
// of what the edge module links from the DoH core and DDR: their wire work
// is dnswire's. The tests may use miekg/dns as the reference.
func TestDoHLinksNoMiekg(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", ".", "./internal/ddr")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "github.com/miekg/") || p == "crypto/tls" {
			t.Errorf("doh or ddr depends on %s", p)
		}
	}
}
