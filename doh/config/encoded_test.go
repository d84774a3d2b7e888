package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// TestEncodeDecodeIsParse: what the module decodes is the configuration
// the host parsed, every key included.
func TestEncodeDecodeIsParse(t *testing.T) {
	c, err := Parse("edge.yaml", []byte(`
engine:
  transaction_timeout: 1500ms
  attempts: 4
  forward_ecs: true
scopes:
  - name: corp
    domains: [corp.example]
    servers: [10.0.0.53, "[2001:db8::53]:5353"]
    search: [corp.example]
  - name: public
    default_route: true
    servers: [1.1.1.1]
hosts:
  printer.lan: [192.0.2.7]
cache:
  max_entries: 500
  stale_ttl: 10s
limits:
  client_qps: 2.5
log:
  level: debug
`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Encode(c)
	if err != nil {
		t.Fatal(err)
	}
	d, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c, d) {
		t.Fatalf("decoded\n%+v\nwant\n%+v", d, c)
	}
}

// TestDecodeEmptyIsDefaults: no configuration is the defaults, as an
// empty file is for Parse.
func TestDecodeEmptyIsDefaults(t *testing.T) {
	d, err := Decode(nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Parse("", nil)
	if err != nil {
		t.Fatal(err)
	}
	p.Source = ""
	if !reflect.DeepEqual(d, p) {
		t.Fatalf("decoded\n%+v\nwant\n%+v", d, p)
	}
}

// TestDecodeChecksAsParse: a bad value is refused with its file and key.
func TestDecodeChecksAsParse(t *testing.T) {
	_, err := Decode([]byte(`{"Source":"edge.yaml","Scopes":[{"Name":"x","DefaultRoute":true,"Servers":["not an address"]}]}`))
	var ce *Error
	if !errors.As(err, &ce) || ce.File != "edge.yaml" || !strings.HasPrefix(ce.Key, "scopes[0].servers") {
		t.Fatalf("err = %v, want a config.Error for edge.yaml scopes[0].servers[0]", err)
	}
}

// TestEncodeGivesNamesInPunycode: the module converts no
// internationalized name, so what the host hands it (Encode, and
// EngineConfig on a reload) has them in punycode, and the engine reads the
// same routes from either form.
func TestEncodeGivesNamesInPunycode(t *testing.T) {
	c, err := Parse("edge.yaml", []byte(`
scopes:
  - name: shop
    domains: [bücher.example]
    search: [bücher.example]
    servers: [10.0.0.53]
  - name: public
    default_route: true
    servers: [1.1.1.1]
hosts:
  drucker.bücher.example: [192.0.2.7]
ddr:
  names: [dns.bücher.example]
`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Encode(c)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "ü") {
		t.Fatalf("encoded configuration still has a Unicode name: %s", b)
	}
	d, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	const puny = "xn--bcher-kva.example"
	if d.Scopes[0].Domains[0] != puny || d.Scopes[0].Search[0] != puny || d.DDR.Names[0] != "dns."+puny ||
		d.Hosts["drucker."+puny] == nil {
		t.Fatalf("decoded names: %+v %v %v", d.Scopes[0], d.Hosts, d.DDR.Names)
	}
	if ec, dc := c.EngineConfig(), d.EngineConfig(); !reflect.DeepEqual(ec, dc) || ec.Scopes[0].Domains[0] != puny {
		t.Fatalf("engine configuration from the file\n%+v\nfrom the encoded form\n%+v", ec, dc)
	}
}
