package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// outsideRef is a reference to a document outside the repository: a
// section of the product brief (SPEC, a section sign, a number) or a
// tracker issue (the word issue and a number). Go's own tracker
// (go.dev/issue/N) is a public address and stays.
var outsideRef = regexp.MustCompile(`SPEC(\.md)? ?§|(^|[^/])\b[Ii]ssue ?#?[0-9]+`)

// TestNothingPointsOutsideTheRepository fails on a comment or document
// that cites the brief's sections or tracker issues: it states the fact,
// or cites an RFC, a seed's tag or a file of the repository instead.
func TestNothingPointsOutsideTheRepository(t *testing.T) {
	out, err := exec.Command("git", "-C", "../..", "ls-files", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, f := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		switch ext := filepath.Ext(f); {
		case ext == ".go", ext == ".md", ext == ".sh", ext == ".mk", ext == ".yaml", ext == ".yml",
			ext == ".js", ext == ".ts", filepath.Base(f) == "Makefile", strings.HasPrefix(f, ".ci/"):
		default:
			continue
		}
		b, err := os.ReadFile(filepath.Join("../..", f))
		if err != nil {
			continue // listed but deleted in the work tree
		}
		for i, line := range strings.Split(string(b), "\n") {
			if outsideRef.MatchString(line) && !strings.Contains(line, "outsideRef") {
				t.Errorf("%s:%d points outside the repository: %s", f, i+1, strings.TrimSpace(line))
			}
		}
	}
}
