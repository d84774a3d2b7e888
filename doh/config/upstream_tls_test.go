package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dohfwd/dohfwd/engine"
)

// Encrypted servers are written tls://IP[:PORT]#NAME and
// https://IP[:PORT]/PATH#NAME beside plain ones, in scopes and the
// fallback servers, and reach the engine as written; upstream_tls's
// bounds reach it too.
func TestEncryptedServerSyntax(t *testing.T) {
	c, err := Parse("t.yaml", []byte(`scopes:
  - name: a
    servers: [192.0.2.1, "tls://192.0.2.2#dns.example", "tls://192.0.2.3:8853#dns.example?pin=sha256/47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="]
fallback_servers: ["https://[2001:db8::1]/q#doh.example", "https://192.0.2.4:8443#doh.example"]
upstream_tls:
  max_connections: 2
  idle_timeout: 5s
`))
	if err != nil {
		t.Fatal(err)
	}
	ec := c.EngineConfig()
	if ec.EncryptedConnections != 2 || ec.EncryptedIdle.String() != "5s" {
		t.Fatalf("upstream_tls: %d connections, idle %v", ec.EncryptedConnections, ec.EncryptedIdle)
	}
	want := map[string]string{
		"192.0.2.1":                           "192.0.2.1:53",
		"tls://192.0.2.2#dns.example":         "tls://192.0.2.2:853#dns.example",
		"https://[2001:db8::1]/q#doh.example": "https://[2001:db8::1]:443/q#doh.example",
		"https://192.0.2.4:8443#doh.example":  "https://192.0.2.4:8443/dns-query#doh.example",
	}
	for _, s := range append(ec.Scopes[0].Servers, ec.FallbackServers...) {
		ep, err := engine.ParseEndpoint(s)
		if err != nil {
			t.Fatal(err)
		}
		if w, ok := want[s]; ok && ep.String() != w {
			t.Errorf("%s: %s, want %s", s, ep.String(), w)
		}
	}
	ep, _ := engine.ParseEndpoint(ec.Scopes[0].Servers[2])
	if ep.Transport != engine.DoT || ep.Addr.Port() != 8853 || len(ep.Pins) != 1 || ep.Name != "dns.example" {
		t.Fatalf("pinned server: %+v", ep)
	}
}

// An unknown scheme, a missing name, a bad pin, a missing or unreadable
// CA file or one without a certificate: check-config and serve refuse
// them by file, line and key.
func TestEncryptedServerRefused(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	os.WriteFile(notPEM, []byte("hello\n"), 0o644)
	unreadable := filepath.Join(dir, "unreadable.pem")
	os.WriteFile(unreadable, []byte("x"), 0o000)
	for _, c := range []struct{ yaml, want string }{
		{"fallback_servers:\n  - quic://192.0.2.1#x\n", `t.yaml:2: fallback_servers[0]: server "quic://192.0.2.1#x": unknown scheme "quic"`},
		{"fallback_servers:\n  - tls://192.0.2.1\n", "t.yaml:2: fallback_servers[0]: server \"tls://192.0.2.1\": no TLS name"},
		{"fallback_servers:\n  - tls://192.0.2.1/p#x\n", "t.yaml:2: fallback_servers[0]: server \"tls://192.0.2.1/p#x\": a path is for https:// servers only"},
		{"scopes:\n  - name: a\n    servers:\n      - tls://192.0.2.1#x?pin=sha256/AAAA\n", "t.yaml:4: scopes[0].servers[0]: server \"tls://192.0.2.1#x?pin=sha256/AAAA\": pin \"sha256/AAAA\": 3 bytes"},
		{"fallback_servers:\n  - tls://192.0.2.1#x?pin=md5/AAAA\n", "t.yaml:2: fallback_servers[0]: server \"tls://192.0.2.1#x?pin=md5/AAAA\": pin \"md5/AAAA\": want sha256/BASE64"},
		{"fallback_servers:\n  - tls://192.0.2.1#bad..name\n", "t.yaml:2: fallback_servers[0]: server \"tls://192.0.2.1#bad..name\": TLS name"},
		{"upstream_tls:\n  ca_file: " + filepath.Join(dir, "missing.pem") + "\n", "t.yaml:2: upstream_tls.ca_file: open " + filepath.Join(dir, "missing.pem") + ": no such file"},
		{"upstream_tls:\n  ca_file: " + notPEM + "\n", "t.yaml:2: upstream_tls.ca_file: " + notPEM + ": no PEM CERTIFICATE in it"},
		{"upstream_tls:\n  ca_file: " + dir + "\n", "t.yaml:2: upstream_tls.ca_file: read " + dir + ": is a directory"},
		{"upstream_tls:\n  max_connections: 0\n", "t.yaml:2: upstream_tls.max_connections: 0: must be at least 1"},
	} {
		_, err := Parse("t.yaml", []byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.yaml, err, c.want)
		}
	}
	if os.Geteuid() != 0 { // root reads any file
		_, err := Parse("t.yaml", []byte("upstream_tls:\n  ca_file: "+unreadable+"\n"))
		if err == nil || !strings.Contains(err.Error(), "t.yaml:2: upstream_tls.ca_file: open "+unreadable+": permission denied") {
			t.Errorf("unreadable CA file: %v", err)
		}
	}
}
