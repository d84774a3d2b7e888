package server

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/dohfwd/dohfwd/doh/config"
	"github.com/dohfwd/dohfwd/doh/internal/ddr"
)

func parseConfig(t *testing.T, yaml string) *config.Config {
	t.Helper()
	c, err := config.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The designation advertises the encrypted listeners at their bound
// ports, under the configured names and addresses.
func TestDesignationFromConfigAndListeners(t *testing.T) {
	c := parseConfig(t, "listen:\n  path: /q\nddr:\n  names: [dns.example.net]\n  addresses: [192.0.2.53, \"2001:db8::53\"]\n")
	bound := map[string]netip.AddrPort{
		"https":   netip.MustParseAddrPort("0.0.0.0:8443"),
		"dot":     netip.MustParseAddrPort("0.0.0.0:853"),
		"doq":     netip.MustParseAddrPort("0.0.0.0:8853"),
		"dns-udp": netip.MustParseAddrPort("0.0.0.0:53"),
	}
	got := Designation(c, bound, []string{"localhost"})
	want := ddr.Designation{
		Names:     []string{"dns.example.net"},
		Addresses: []netip.Addr{netip.MustParseAddr("192.0.2.53"), netip.MustParseAddr("2001:db8::53")},
		Endpoints: []ddr.Endpoint{{Protocol: ddr.DoH, Port: 8443, Path: "/q"}, {Protocol: ddr.DoT, Port: 853}, {Protocol: ddr.DoQ, Port: 8853}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
}

// Without ddr keys: the ACME domains (else the certificate's names) and
// the listeners' own addresses unless they are wildcards.
func TestDesignationDefaults(t *testing.T) {
	acme := parseConfig(t, "tls:\n  mode: acme\n  acme:\n    domains: [doh.example.net]\n")
	bound := map[string]netip.AddrPort{"https": netip.MustParseAddrPort("192.0.2.1:443"), "dot": netip.MustParseAddrPort("[::]:853")}
	d := Designation(acme, bound, nil)
	if !reflect.DeepEqual(d.Names, []string{"doh.example.net"}) || !reflect.DeepEqual(d.Addresses, []netip.Addr{netip.MustParseAddr("192.0.2.1")}) || len(d.Endpoints) != 2 {
		t.Errorf("acme: %+v", d)
	}
	self := parseConfig(t, "")
	d = Designation(self, map[string]netip.AddrPort{"https": netip.MustParseAddrPort("127.0.0.1:8443")}, []string{"localhost"})
	if !reflect.DeepEqual(d.Names, []string{"localhost"}) || len(d.Endpoints) != 1 || d.Endpoints[0].Protocol != ddr.DoH {
		t.Errorf("self-signed: %+v", d)
	}
	// Only plain listeners: nothing to designate.
	if d := Designation(self, map[string]netip.AddrPort{"http": netip.MustParseAddrPort("127.0.0.1:8080")}, []string{"localhost"}); len(d.Endpoints) != 0 || len(d.Names) != 0 {
		t.Errorf("plain only: %+v", d)
	}
}
