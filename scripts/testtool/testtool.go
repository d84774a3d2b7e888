// Package testtool is how a test meets a missing external tool (nsd,
// curl, workerd, a browser): under CI it fails, because CI installs every
// tool (scripts/setup.d) and a skip there would pass without checking
// anything; elsewhere it skips, loudly, so a developer without the tool
// can still run the rest.
package testtool

import (
	"fmt"
	"os"
	"strconv"
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
