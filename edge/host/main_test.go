package host

import (
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/dohfwd/dohfwd/doh/config"
)

// Main hands the module the loaded configuration re-encoded as YAML; the
// module's strict parser must read it back to the same configuration.
func TestConfigYAMLRoundTrip(t *testing.T) {
	cfg, err := config.Parse("test.yaml", []byte(`
listen: {path: /q, trusted_proxies: [10.0.0.0/8]}
engine: {transaction_timeout: 1500ms, attempts: 2, question_timeout: 5s}
scopes:
  - name: corp
    domains: [corp.example]
    servers: [192.0.2.53, "[2001:db8::53]:5353"]
    search: [corp.example]
hosts: {router.lan: [192.168.1.1]}
cache: {max_entries: 10, negative_max_ttl: 10m}
`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	back, err := config.Parse("again.yaml", b)
	if err != nil {
		t.Fatalf("the module would refuse:\n%s\n%v", b, err)
	}
	again, _ := yaml.Marshal(back)
	if string(again) != string(b) {
		t.Fatalf("round trip changed the configuration:\n%s\n%s", b, again)
	}
	if back.Engine.TransactionTimeout != cfg.Engine.TransactionTimeout || back.Listen.Path != "/q" ||
		len(back.Scopes) != 1 || back.Scopes[0].Servers[1] != "[2001:db8::53]:5353" || back.Hosts["router.lan"][0] != "192.168.1.1" {
		t.Fatalf("round trip lost values:\n%s", again)
	}
}
