// Package testtool is how a test meets a missing external tool (nsd,
// curl, workerd, a browser): under CI it fails, because CI installs every
// tool (scripts/setup.d) and a skip there would pass without checking
// anything; elsewhere it skips, loudly, so a developer without the tool
// can still run the rest.
package testtool

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// CI reports whether the tests run under CI: CI=true (or 1), as CI
// systems and `make test` in CI set it.
func CI() bool {
	ci, err := strconv.ParseBool(os.Getenv("CI"))
	return err == nil && ci
}

// Missing ends t because a tool it needs is missing: t fails under CI
// and skips elsewhere. The message says what is not tested.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if CI() {
		t.Fatalf("MISSING TOOL under CI=true (a skip would pass without testing): %s", msg)
		return
	}
	t.Skipf("!!! SKIPPED LOUDLY: %s (with CI=true this fails)", msg)
}

// Find returns the path of the tool name: on PATH, in /usr/sbin or /sbin
// (nsd, redis-server and the like, for a PATH without them), or where `go
// install` puts it ($GOBIN, $GOPATH/bin: pebble, h2spec). A tool found
// nowhere ends t as Missing says; install says how to get it.
func Find(t testing.TB, name, install string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	dirs := []string{"/usr/sbin", "/sbin", os.Getenv("GOBIN")}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		for _, p := range filepath.SplitList(strings.TrimSpace(string(out))) {
			dirs = append(dirs, filepath.Join(p, "bin"))
		}
	}
	for _, d := range dirs {
		if d == "" {
			continue
		}
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	Missing(t, "%s is not installed (%s)", name, install)
	return ""
}
