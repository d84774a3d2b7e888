// Package moduletest builds the edge WebAssembly module (edge/module) once
// per test binary, for the tests of its hosts.
package moduletest

import (
	"cmp"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

var (
	once  sync.Once
	wasm  []byte
	path  string
	built error
)

// Build returns the module's bytes and a file holding them, building it
// with the same flags as `make wasm`. Go's build cache makes repeated
// builds quick.
func Build(t testing.TB) (wasmBytes []byte, file string) {
	t.Helper()
	once.Do(func() {
		var dir string
		dir, built = os.MkdirTemp("", "dohfwd-wasm-")
		if built != nil {
			return
		}
		path = filepath.Join(dir, "dohfwd.wasm")
		cmd := exec.Command("go", "build", "-buildmode=c-shared", "-trimpath", "-ldflags=-s -w", "-o", path, "github.com/dohfwd/dohfwd/edge/module")
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "GOWASM=satconv,signext") // as edge/edge.mk
		out, err := cmd.CombinedOutput()
		if err != nil {
			built = &buildError{err: err, out: strings.TrimSpace(string(out))}
			return
		}
		wasm, built = os.ReadFile(path)
	})
	if built != nil {
		t.Fatalf("building the edge module: %v", built)
	}
	return wasm, path
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return e.err.Error() + ": " + e.out }

// CacheDir is a wazero compilation cache shared by test runs, so only the
// first run pays for compiling the module.
func CacheDir(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(os.TempDir(), "dohfwd-wazero-test-cache")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	pruneOnce.Do(func() { prune(dir, 3) })
	return dir
}

var pruneOnce sync.Once

// prune keeps the newest keep entries of each folder of the cache: every
// change to the module adds a compiled copy of about 50 MB.
func prune(dir string, keep int) {
	subs, _ := os.ReadDir(dir)
	for _, sub := range subs {
		if !sub.IsDir() {
			continue
		}
		p := filepath.Join(dir, sub.Name())
		entries, _ := os.ReadDir(p)
		type aged struct {
			name string
			mod  int64
		}
		var files []aged
		for _, e := range entries {
			if info, err := e.Info(); err == nil {
				files = append(files, aged{e.Name(), info.ModTime().UnixNano()})
			}
		}
		slices.SortFunc(files, func(a, b aged) int { return cmp.Compare(b.mod, a.mod) })
		for _, f := range files[min(keep, len(files)):] {
			os.RemoveAll(filepath.Join(p, f.name))
		}
	}
}
