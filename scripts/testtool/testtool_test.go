package testtool

import (
	"testing"
)

// recorder is a testing.TB that records how the test ended.
type recorder struct {
	testing.TB
	failed, skipped bool
}

func (r *recorder) Helper()                        {}
func (r *recorder) Fatalf(format string, a ...any) { r.failed = true }
func (r *recorder) Skipf(format string, a ...any)  { r.skipped = true }

// A missing tool fails the test under CI=true and skips it elsewhere.
func TestMissingFailsUnderCI(t *testing.T) {
	for _, tc := range []struct {
		ci         string
		fail, skip bool
	}{{"true", true, false}, {"1", true, false}, {"", false, true}, {"false", false, true}} {
		t.Setenv("CI", tc.ci)
		r := &recorder{TB: t}
		Missing(r, "nsd is not installed")
		if r.failed != tc.fail || r.skipped != tc.skip {
			t.Errorf("CI=%q: failed %v skipped %v; want %v %v", tc.ci, r.failed, r.skipped, tc.fail, tc.skip)
		}
	}
}

// Find returns a tool on PATH and, under CI=true, fails for one that is
// nowhere.
func TestFind(t *testing.T) {
	if p := Find(t, "sh", "every machine has it"); p == "" {
		t.Fatal("sh not found")
	}
	t.Setenv("CI", "true")
	r := &recorder{TB: t}
	Find(r, "no-such-tool-dohfwd", "it does not exist")
	if !r.failed {
		t.Error("a missing tool did not fail under CI=true")
	}
}
