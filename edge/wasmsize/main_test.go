package main

import "testing"

func section(id byte, content []byte) []byte {
	return append([]byte{id, byte(len(content))}, content...)
}

func name(s string) []byte { return append([]byte{byte(len(s))}, s...) }

// A module with one imported and two defined functions: the sizes are the
// defined bodies', by the names after the import's index.
func TestParseAttributesBodiesToNames(t *testing.T) {
	wasm := []byte("\x00asm\x01\x00\x00\x00")
	wasm = append(wasm, section(1, []byte{1, 0x60, 0, 0})...)
	imp := append([]byte{1}, name("m")...)
	imp = append(append(imp, name("f")...), 0, 0)
	wasm = append(wasm, section(2, imp)...)
	wasm = append(wasm, section(3, []byte{2, 0, 0})...)
	wasm = append(wasm, section(10, []byte{2, 2, 0, 0x0b, 5, 0, 0x41, 0, 0x1a, 0x0b})...)
	names := []byte{3}
	for i, n := range []string{"imp", "github.com_x_y.F", "runtime.g"} {
		names = append(append(names, byte(i)), name(n)...)
	}
	custom := append(name("name"), section(1, names)...)
	wasm = append(wasm, section(0, custom)...)

	m, err := parse(wasm)
	if err != nil {
		t.Fatal(err)
	}
	if m.imports != 1 || len(m.bodies) != 2 || m.bodies[0] != 2 || m.bodies[1] != 5 {
		t.Fatalf("imports %d, bodies %v; want 1 and [2 5]", m.imports, m.bodies)
	}
	if m.names[1] != "github.com_x_y.F" || m.names[2] != "runtime.g" {
		t.Fatalf("names %v", m.names)
	}
	if _, err := parse(wasm[:len(wasm)-3]); err == nil {
		t.Fatal("a cut module must not parse")
	}
}

func TestPackageOf(t *testing.T) {
	for in, want := range map[string]string{
		"github.com_miekg_dns.(*Msg).Pack":                "github.com_miekg_dns",
		"runtime.mallocgc":                                "runtime",
		"type_.eq.net_http.segment":                       "net_http",
		"go.yaml.in_yaml_v3.(*parser).parse":              "go.yaml.in_yaml_v3",
		"vendor_golang.org_x_net_http2_hpack.init":        "golang.org_x_net_http2_hpack",
		"github.com_dohfwd_dohfwd_engine.(*Engine).Close": "github.com_dohfwd_dohfwd_engine",
	} {
		if got := packageOf(in); got != want {
			t.Errorf("packageOf(%q) = %q, want %q", in, got, want)
		}
	}
}
