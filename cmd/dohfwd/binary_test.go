package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The native binary carries what it uses: the wazero host is linked only
// into dohfwd-edge.
func TestNativeBinaryDoesNotLinkWazero(t *testing.T) {
	for pkg, wantWazero := range map[string]bool{".": false, "../dohfwd-edge": true} {
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", pkg, err, out)
		}
		deps := string(out)
		links := strings.Contains(deps, "github.com/tetratelabs/wazero") || strings.Contains(deps, "github.com/dohfwd/dohfwd/edge/host")
		if links != wantWazero {
			t.Errorf("%s links the wazero host: %v, want %v", pkg, links, wantWazero)
		}
	}
}
