package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dohfwd/dohfwd/engine"
)

// FuzzParse feeds arbitrary files to the configuration loader. It must
// not panic; a refusal must name the file; and a file it accepts must be
// one the engine takes too (engine.Validate), with limits in range.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "configs", "*.yaml"))
	if len(files) == 0 {
		f.Fatal("no seed configurations in testdata/configs")
	}
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("limits:\n  client_qps: .inf\n"))
	f.Add([]byte("scopes:\n  - &a {name: x, servers: [127.0.0.1]}\n  - *a\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("fuzz.yaml", data)
		if err != nil {
			if !strings.Contains(err.Error(), "fuzz.yaml") {
				t.Fatalf("an error that names no file: %v", err)
			}
			return
		}
		if err := engine.Validate(c.EngineConfig()); err != nil {
			t.Fatalf("accepted, but the engine refuses it: %v\n%s", err, data)
		}
		if l := c.Limits; l.ClientQPS < 0 || l.PrefixV4 < 1 || l.PrefixV4 > 32 || l.PrefixV6 < 1 || l.PrefixV6 > 128 {
			t.Fatalf("accepted limits out of range: %+v", l)
		}
	})
}
