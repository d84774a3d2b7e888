package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/dohfwd/dohfwd/engine"
)

func TestEmbeddedDefaultEqualsBuiltInDefaults(t *testing.T) {
	c, err := Parse(DefaultSource, defaultYAML)
	if err != nil {
		t.Fatal(err)
	}
	want := defaults()
	want.Source = DefaultSource
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("default.yaml and defaults() differ:\n%+v\n%+v", c, want)
	}
	if c.Listen.HTTPS != "127.0.0.1:8443" || c.Listen.Admin != "127.0.0.1:9153" || c.TLS.Mode != "self-signed" {
		t.Fatalf("embedded default: %+v", c.Listen)
	}
}

func TestDefaultAddsSystemScope(t *testing.T) {
	p := filepath.Join(t.TempDir(), "resolv.conf")
	os.WriteFile(p, []byte("search lan\nnameserver 192.0.2.53\nnameserver ::1\n"), 0o644)
	defer func(old string) { resolvConf = old }(resolvConf)
	resolvConf = p
	c, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"192.0.2.53", "::1"}
	if len(c.Scopes) != 1 || !c.Scopes[0].DefaultRoute || !reflect.DeepEqual(c.Scopes[0].Servers, want) {
		t.Fatalf("system scope: %+v", c.Scopes)
	}
}

func TestEmptyFileIsAllDefaults(t *testing.T) {
	c, err := Parse("empty.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Engine.Attempts != 3 || c.Engine.TransactionTimeout != 2*time.Second || c.Cache.MaxEntries != 100000 {
		t.Fatalf("%+v", c)
	}
}

// The example file of README.md's "Configuration", every key written out.
const fullFile = `listen:
  https: 127.0.0.1:8443
  http: "127.0.0.1:8080"
  dot: 127.0.0.1:853
  doq: 127.0.0.1:853
  dns: 127.0.0.1:53
  admin: 127.0.0.1:9153
  path: /dns-query
  trusted_proxies: [10.0.0.0/8, 192.0.2.1]
  proxy_protocol: [10.0.0.0/8, fd00::/8]
tls:
  mode: self-signed
  cert_file: ""
  key_file: ""
  acme:
    domains: [doh.example.net]
    email: ""
    ca: ""
    ca_root: ""
    storage: redis://redis.dohfwd.svc:6379/0
    redis:
      password_file: /run/secrets/redis-password
      ca_root: ""
      key_prefix: dohfwd
      lock_lease: 30s
    http_listen: ""
    disable_tls_alpn: false
    profile: ""
engine:
  transaction_timeout: 2s
  attempts: 3
  demotion_period: 30s
  in_flight_ceiling: 4096
  question_timeout: 0s
  probe: false
  forward_ecs: false
scopes:
  - name: corp
    domains: [corp.example]
    default_route: false
    servers: [10.0.0.53, "[2001:db8::53]:5353"]
    search: [corp.example]
    sources_v4: []
    sources_v6: []
fallback_servers: [1.1.1.1, 8.8.8.8, 9.9.9.9]
hosts: {router.lan: [192.168.1.1]}
cache:
  max_entries: 100000
  min_ttl: 0s
  max_ttl: 24h
  negative_max_ttl: 1h
  stale_max: 24h
  stale_ttl: 30s
  stale_answer_after: 1800ms
  prefetch_min_hits: 2
log:
  level: info
  format: auto
ddr:
  names: [dns.example.net]
  addresses: [192.0.2.53, "2001:db8::53"]
apple_profile:
  sign_cert: ""
  sign_key: ""
`

func TestEverySpecKeyIsAccepted(t *testing.T) {
	c, err := Parse("full.yaml", []byte(fullFile))
	if err != nil {
		t.Fatal(err)
	}
	ec := c.EngineConfig()
	if len(ec.Scopes) != 1 || ec.Scopes[0].Servers[1] != "[2001:db8::53]:5353" || ec.Hosts["router.lan"][0] != "192.168.1.1" {
		t.Fatalf("engine config: %+v", ec)
	}
}

func TestErrorsNameFileLineAndKey(t *testing.T) {
	cases := []struct {
		name, file, want string
	}{
		{"unknown key", "listen:\n  https: 127.0.0.1:8443\n  admn: 127.0.0.1:9\n", "bad.yaml:3: listen.admn: unknown key"},
		{"unknown top key", "log:\n  level: info\nfoo: 1\n", "bad.yaml:3: foo: unknown key"},
		{"unknown key in scope", "scopes:\n  - name: a\n    server: [1.2.3.4]\n", "bad.yaml:3: scopes[0].server: unknown key"},
		{"wrong type", "engine:\n  attempts: three\n", "bad.yaml:2: engine.attempts: wrong type"},
		{"wrong duration", "engine:\n  transaction_timeout: soon\n", "bad.yaml:2: engine.transaction_timeout: wrong type"},
		{"bad server", "fallback_servers:\n  - 1.1.1.1\n  - 300.1.1.1\n", "bad.yaml:3: fallback_servers[1]: server \"300.1.1.1\""},
		{"bad scope server", "scopes:\n  - name: a\n    servers: [1.2.3.4:99999]\n", "bad.yaml:3: scopes[0].servers[0]:"},
		{"bad listen", "listen:\n  admin: nowhere\n", "bad.yaml:2: listen.admin:"},
		{"bad proxy", "listen:\n  trusted_proxies: [10.0.0.0/33]\n", "bad.yaml:2: listen.trusted_proxies[0]:"},
		{"password in redis URL", "tls:\n  mode: acme\n  acme:\n    domains: [doh.example.net]\n    storage: redis://:hunter2@redis:6379/0\n", "bad.yaml:5: tls.acme.storage: a password in the URL is refused"},
		{"long lock lease", "tls:\n  mode: acme\n  acme:\n    domains: [doh.example.net]\n    redis:\n      lock_lease: 5m\n", "bad.yaml:6: tls.acme.redis.lock_lease: 5m0s: want 1s to 1m0s"},
		{"redis ca_root without TLS", "tls:\n  mode: acme\n  acme:\n    domains: [doh.example.net]\n    storage: redis://redis:6379\n    redis:\n      ca_root: ca.pem\n", "bad.yaml:7: tls.acme.redis.ca_root: needs a rediss://"},
		{"bad proxy protocol source", "listen:\n  proxy_protocol:\n    - 10.0.0.0/8\n    - balancer\n", "bad.yaml:4: listen.proxy_protocol[1]:"},
		{"bad mode", "tls:\n  mode: magic\n", "bad.yaml:2: tls.mode:"},
		{"files without cert", "tls:\n  mode: files\n", "bad.yaml:1: tls.cert_file: required"},
		{"bad level", "log:\n  level: loud\n", "bad.yaml:2: log.level:"},
		{"acme without a challenge", "tls:\n  mode: acme\n  acme:\n    domains: [doh.example.net]\n    disable_tls_alpn: true\n", "bad.yaml:5: tls.acme.disable_tls_alpn: leaves no challenge"},
		{"bad host address", "hosts:\n  router.lan: [192.168.1.300]\n", "bad.yaml:2: hosts.router.lan[0]:"},
		{"zero attempts", "engine:\n  attempts: 0\n", "bad.yaml:2: engine.attempts: 0: must be at least 1"},
		{"negative stale_max", "cache:\n  stale_max: -1h\n", "bad.yaml:2: cache.stale_max: -1h0m0s: must not be negative"},
		{"stale_ttl under 1s", "cache:\n  max_entries: 5\n  stale_ttl: 500ms\n", "bad.yaml:3: cache.stale_ttl: 500ms: must be at least 1s"},
		{"negative stale timer", "cache:\n  stale_answer_after: -1s\n", "bad.yaml:2: cache.stale_answer_after: -1s: must not be negative"},
		{"negative prefetch hits", "cache:\n  prefetch_min_hits: -2\n", "bad.yaml:2: cache.prefetch_min_hits: -2: must not be negative"},
		{"prefetch hits not a number", "cache:\n  prefetch_min_hits: often\n", "bad.yaml:2: cache.prefetch_min_hits: wrong type"},
		{"malformed", "listen:\n  https: [127.0.0.1\nlog: {\n", "bad.yaml:"},
		{"tab indent", "listen:\n\thttps: x\n", "bad.yaml:2: "},
		{"bad dot listen", "listen:\n  dot: 853\n", "bad.yaml:2: listen.dot:"},
		{"bad doq listen", "listen:\n  doq: \":853/udp\"\n", "bad.yaml:2: listen.doq:"},
		{"bad dns listen", "listen:\n  dns: 10.0.0.1\n", "bad.yaml:2: listen.dns:"},
		{"bad ddr name", "ddr:\n  names: [\"a..b\"]\n", "bad.yaml:2: ddr.names[0]:"},
		{"bad ddr address", "ddr:\n  addresses:\n    - 192.0.2.1\n    - 0.0.0.0\n", "bad.yaml:4: ddr.addresses[1]:"},
		{"half a signing pair", "apple_profile:\n  sign_cert: a.pem\n", "bad.yaml:1: apple_profile.sign_key: required"},
		{"unknown ddr key", "ddr:\n  name: [a.example]\n", "bad.yaml:2: ddr.name: unknown key"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("bad.yaml", []byte(tc.file))
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

func TestLoadNamesThePath(t *testing.T) {
	p := filepath.Join(t.TempDir(), "dohfwd.yaml")
	os.WriteFile(p, []byte("cache:\n  max_entrys: 5\n"), 0o644)
	_, err := Load(p)
	if err == nil || !strings.HasPrefix(err.Error(), p+":2: cache.max_entrys: unknown key") {
		t.Fatalf("got %v", err)
	}
}

func TestSystemServers(t *testing.T) {
	p := filepath.Join(t.TempDir(), "resolv.conf")
	os.WriteFile(p, []byte("# comment\nsearch lan\nnameserver 192.0.2.53\nnameserver ::1\noptions ndots:1\n"), 0o644)
	got, err := SystemServers(p)
	if err != nil || !reflect.DeepEqual(got, []string{"192.0.2.53", "::1"}) {
		t.Fatalf("%v %v", got, err)
	}
}

// Everything the engine refuses is refused at load with FILE:LINE: KEY,
// and the engine would indeed have refused it. IPv6 zones are refused in
// every address (servers in each form, sources, hosts): the engine binds
// to no interface, so a zone could not be honoured.
func TestEngineRefusalsNameFileLineAndKey(t *testing.T) {
	cases := []struct{ name, file, want string }{
		{"zone in [IPv6%zone]:port", "scopes:\n  - name: a\n    servers: [\"[fe80::1%eth0]:53\"]\n", "bad.yaml:3: scopes[0].servers[0]: server \"[fe80::1%eth0]:53\": IPv6 zones are not supported"},
		{"zone in [IPv6%zone]", "scopes:\n  - name: a\n    servers: [\"[fe80::1%eth0]\"]\n", "bad.yaml:3: scopes[0].servers[0]: server \"[fe80::1%eth0]\": IPv6 zones"},
		{"zone in bare IPv6%zone", "fallback_servers:\n  - 192.0.2.1\n  - fe80::1%eth0\n", "bad.yaml:3: fallback_servers[1]: server \"fe80::1%eth0\": IPv6 zones"},
		{"zone in a source", "scopes:\n  - name: a\n    servers: [192.0.2.1]\n    sources_v6: [\"fe80::2%eth0\"]\n", "bad.yaml:4: scopes[0].sources_v6[0]: source \"fe80::2%eth0\": IPv6 zones"},
		{"zone in a host", "hosts:\n  router.lan: [\"fe80::1%eth0\"]\n", "bad.yaml:2: hosts.router.lan[0]: hosts \"router.lan\": address \"fe80::1%eth0\": IPv6 zones"},
		{"root as search domain", "scopes:\n  - name: a\n    servers: [192.0.2.1]\n    search: [\".\"]\n", "bad.yaml:4: scopes[0].search[0]: \".\": the root is not a search domain"},
		{"name IDNA refuses", "scopes:\n  - name: a\n    servers: [192.0.2.1]\n    domains: [\"b\u00fc\u200dcher.example\"]\n", "bad.yaml:4: scopes[0].domains[0]:"},
		{"scope named fallback", "scopes:\n  - name: fallback\n    servers: [192.0.2.1]\n", "bad.yaml:2: scopes[0].name: \"fallback\""},
		{"root as host name", "hosts:\n  \".\": [192.0.2.1]\n", "bad.yaml:2: hosts..: \".\" is not a domain name"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("bad.yaml", []byte(tc.file))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			// Decoded without the checks, the engine refuses it too.
			c := defaults()
			if err := yaml.Unmarshal([]byte(tc.file), c); err != nil {
				t.Fatal(err)
			}
			if err := engine.Validate(c.EngineConfig()); err == nil {
				t.Fatal("the engine accepts it: the check is stricter than the engine")
			}
		})
	}
}

// A link-local nameserver with a zone in resolv.conf is refused with the
// file and line, not later by the engine.
func TestDefaultRefusesZonedSystemServer(t *testing.T) {
	p := filepath.Join(t.TempDir(), "resolv.conf")
	os.WriteFile(p, []byte("search lan\nnameserver 192.0.2.53\nnameserver fe80::1%eth0\n"), 0o644)
	defer func(old string) { resolvConf = old }(resolvConf)
	resolvConf = p
	_, err := Default()
	if err == nil || !strings.HasPrefix(err.Error(), p+":3: nameserver: server \"fe80::1%eth0\": IPv6 zones") {
		t.Fatalf("got %v", err)
	}
}

func TestServeStaleAndPrefetchKeys(t *testing.T) {
	c, err := Parse("empty.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	ec := c.EngineConfig().Cache
	if ec.StaleMax != 24*time.Hour || ec.StaleTTL != 30*time.Second || ec.StaleAnswerAfter != 1800*time.Millisecond || ec.PrefetchMinHits != 2 {
		t.Fatalf("defaults: %+v", ec)
	}
	c, err = Parse("off.yaml", []byte("cache:\n  stale_max: 0s\n  stale_answer_after: 0s\n  prefetch_min_hits: 0\n  stale_ttl: 1m\n"))
	if err != nil {
		t.Fatal(err)
	}
	ec = c.EngineConfig().Cache
	if ec.StaleMax != 0 || ec.StaleAnswerAfter != 0 || ec.PrefetchMinHits != 0 || ec.StaleTTL != time.Minute {
		t.Fatalf("written: %+v", ec)
	}
}

// dnstap is off by default; its address is unix:/path or tcp:host:port,
// and a bad one or a queue out of range is an error naming the key.
func TestDnstapKeys(t *testing.T) {
	c, err := Parse("ok.yaml", []byte("dnstap:\n  address: unix:/run/dnstap.sock\n  queue: 5\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Dnstap.Address != "unix:/run/dnstap.sock" || c.Dnstap.Queue != 5 {
		t.Errorf("dnstap %+v", c.Dnstap)
	}
	if d := defaults().Dnstap; d.Address != "" || d.Queue != 10000 {
		t.Errorf("default dnstap %+v, want off with a queue of 10000", d)
	}
	for _, tc := range []struct{ in, network, address string }{
		{"unix:/a.sock", "unix", "/a.sock"}, {"/a.sock", "unix", "/a.sock"},
		{"tcp:127.0.0.1:6000", "tcp", "127.0.0.1:6000"}, {"[::1]:6000", "tcp", "[::1]:6000"},
	} {
		if n, a, err := DnstapAddress(tc.in); err != nil || n != tc.network || a != tc.address {
			t.Errorf("DnstapAddress(%q) = %q %q %v", tc.in, n, a, err)
		}
	}
	for _, tc := range []struct{ yaml, want string }{
		{"dnstap:\n  address: tcp:nowhere\n", "bad.yaml:2: dnstap.address:"},
		{"dnstap:\n  address: \"unix:\"\n", "bad.yaml:2: dnstap.address:"},
		{"dnstap:\n  queue: 0\n", "bad.yaml:2: dnstap.queue:"},
		{"dnstap:\n  adress: x\n", "bad.yaml:2: dnstap.adress: unknown key"},
	} {
		_, err := Parse("bad.yaml", []byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.yaml, err, tc.want)
		}
	}
}
