package engine_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// The engine's only network I/O is its socket interface: it must not
// import net/http or the front end, and it must build for wasip1.

func TestEngineImportsNoHTTP(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if p == "net/http" || strings.HasPrefix(p, "net/http/") || strings.HasPrefix(p, "github.com/dohfwd/dohfwd/doh") ||
			strings.HasPrefix(p, "golang.org/x/net/http") || strings.HasPrefix(p, "github.com/caddyserver/") {
			t.Errorf("engine depends on %s", p)
		}
	}
}

// TestEngineBuildsForWasip1 runs under -short too: the build takes
// seconds once cached, and a skip would pass without checking.
func TestEngineBuildsForWasip1(t *testing.T) {
	cmd := exec.Command("go", "build", "-o", os.DevNull, ".")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("GOOS=wasip1 GOARCH=wasm go build: %v\n%s", err, out)
	}
	cmd = exec.Command("go", "list", "-deps", ".")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "net/http") {
		t.Fatal("the wasip1 engine depends on net/http")
	}
}

// The engine reads and writes DNS messages with dnswire: miekg/dns, whose
// client and server bring crypto/tls into the edge module, is for the
// native front ends and the tests only. config and telemetry, which the
// module links beside the engine, do not bring it back either.
func TestEngineLinksNoMiekg(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", ".", "../doh/config", "./telemetry", "./dnswire")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "github.com/miekg/") {
			t.Errorf("engine, config or telemetry depends on %s", p)
		}
	}
}
