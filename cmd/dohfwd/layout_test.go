package main

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// theCard is the top level the design fixes: a directory per room, the
// module files, the Makefile and the README. Dot-entries (.ci, .gitignore,
// .git) are the tools' own and not part of the card.
var theCard = []string{
	"Makefile", "README.md", "cmd", "deploy", "doh", "edge", "engine", "go.mod", "go.sum", "scripts",
}

// TestLayoutRootHoldsOnlyTheCard fails when a package, a file or a folder
// appears at the top level beside the card's entries: a new package goes
// into the room it serves.
func TestLayoutRootHoldsOnlyTheCard(t *testing.T) {
	out, err := exec.Command("git", "-C", "../..", "ls-files", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	seen := map[string]bool{}
	for _, f := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		top, _, _ := strings.Cut(f, "/")
		if top == "" || strings.HasPrefix(top, ".") {
			continue
		}
		seen[top] = true
	}
	for top := range seen {
		if !slices.Contains(theCard, top) {
			t.Errorf("top level holds %q, which is not on the card %v: move it into the room it serves", top, theCard)
		}
	}
	for _, want := range theCard {
		if !seen[want] {
			t.Errorf("top level lacks %q", want)
		}
	}
}

// TestLayoutCodeMapListsEveryPackage compares README.md's code map with
// the packages `go list` finds (the WebAssembly-only module included), so
// that a package added, moved or removed shows in the map.
func TestLayoutCodeMapListsEveryPackage(t *testing.T) {
	const module = "github.com/dohfwd/dohfwd"
	list := func(env ...string) []string {
		cmd := exec.Command("go", "list", "./...")
		cmd.Dir = "../.."
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list %v: %v", env, err)
		}
		var pkgs []string
		for _, p := range strings.Fields(string(out)) {
			pkgs = append(pkgs, strings.TrimPrefix(strings.TrimPrefix(p, module), "/"))
		}
		return pkgs
	}
	want := append(list(), list("GOOS=wasip1", "GOARCH=wasm")...)
	slices.Sort(want)
	want = slices.Compact(want)

	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "<!-- codemap:begin -->")
	table, _, ok2 := strings.Cut(rest, "<!-- codemap:end -->")
	if !ok || !ok2 {
		t.Fatal("README.md has no codemap:begin/end block")
	}
	var got []string
	for _, line := range strings.Split(table, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		pkg := strings.Trim(strings.TrimSpace(cells[1]), "`")
		if strings.TrimSpace(cells[2]) == "" {
			t.Errorf("code map: %s has no job", pkg)
		}
		got = append(got, pkg)
	}
	slices.Sort(got)
	for _, p := range want {
		if _, found := slices.BinarySearch(got, p); !found {
			t.Errorf("README.md's code map lacks package %s", p)
		}
	}
	for _, p := range got {
		if _, found := slices.BinarySearch(want, p); !found {
			t.Errorf("README.md's code map lists %s, which go list does not find", p)
		}
	}
}
