package config

import (
	"strings"
	"testing"
	"time"
)

// TestODoHKeys: the odoh section reads as written, and each mistake is
// refused as FILE:LINE: KEY: problem.
func TestODoHKeys(t *testing.T) {
	c, err := Parse("ok.yaml", []byte("odoh:\n  target: true\n  key_file: /var/lib/dohfwd/odoh.key\n  rotate: 24h\n  relay: true\n  targets: [odoh.example, \"127.0.0.1:8443\", \"[::1]:443\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if o := c.ODoH; !o.Target || !o.Relay || o.Rotate != 24*time.Hour || len(o.Targets) != 3 || o.KeyFile == "" {
		t.Fatalf("odoh = %+v", o)
	}
	if d := defaults().ODoH; d.Target || d.Relay {
		t.Fatalf("ODoH is on by default: %+v", d)
	}
	for _, tc := range []struct{ file, want string }{
		{"odoh:\n  key_file: /k\n", "bad.yaml:2: odoh.key_file: needs odoh.target: true"},
		{"odoh:\n  target: true\n  rotate: 5m\n", "bad.yaml:3: odoh.rotate: 5m0s: want 0 (never) or at least 1h0m0s"},
		{"odoh:\n  relay: true\n", "bad.yaml:2: odoh.relay: needs odoh.targets"},
		{"odoh:\n  targets: [a.example]\n", "bad.yaml:2: odoh.targets: needs odoh.relay: true"},
		{"odoh:\n  relay: true\n  targets:\n    - a.example\n    - \"a.example:0\"\n", "bad.yaml:5: odoh.targets[1]: \"a.example:0\": port"},
		{"odoh:\n  relay: true\n  targets: [\"https://a.example/x\"]\n", "bad.yaml:3: odoh.targets[0]: \"https://a.example/x\": want host or host:port"},
		{"odoh:\n  target: true\n  rotaet: 1h\n", "bad.yaml:3: odoh.rotaet"},
	} {
		_, err := Parse("bad.yaml", []byte(tc.file))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.file, err, tc.want)
		}
	}
}
