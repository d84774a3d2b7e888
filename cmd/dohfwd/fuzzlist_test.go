package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestMakefileFuzzesEveryTarget fails when a native fuzz target of the
// module is missing from the Makefile's FUZZ_TARGETS, whose targets `make
// test` fuzzes (fuzz-short): a target not listed only ever runs its seeds.
func TestMakefileFuzzesEveryTarget(t *testing.T) {
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^FUZZ_TARGETS :=((?:.*\\\n)*.*)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("Makefile: no FUZZ_TARGETS")
	}
	listed := strings.Fields(strings.ReplaceAll(string(m[1]), "\\\n", " "))

	out, err := exec.Command("git", "-C", "../..", "ls-files", "--cached", "--others", "--exclude-standard", "*_test.go").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	fuzzFunc := regexp.MustCompile(`(?m)^func (Fuzz\w+)\(\w+ \*testing\.F\)`)
	var found []string
	for _, f := range strings.Fields(string(out)) {
		if otherModule(f) {
			continue
		}
		b, err := os.ReadFile(filepath.Join("../..", f))
		if err != nil {
			continue
		}
		for _, m := range fuzzFunc.FindAllSubmatch(b, -1) {
			found = append(found, "./"+filepath.Dir(f)+":"+string(m[1]))
		}
	}
	if len(found) == 0 {
		t.Fatal("found no fuzz targets")
	}
	for _, f := range found {
		if !slices.Contains(listed, f) {
			t.Errorf("fuzz target %s is not in the Makefile's FUZZ_TARGETS: only its seeds run", f)
		}
	}
	for _, l := range listed {
		if !slices.Contains(found, l) {
			t.Errorf("FUZZ_TARGETS lists %s, which is no fuzz target", l)
		}
	}
}

// otherModule reports whether the file at path (from the repository's
// root) belongs to a module of its own, such as deploy/manifestcheck.
func otherModule(path string) bool {
	for dir := filepath.Dir(path); dir != "."; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join("../..", dir, "go.mod")); err == nil {
			return true
		}
	}
	return false
}
