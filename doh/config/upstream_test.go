package config

import (
	"strings"
	"testing"

	"github.com/dohfwd/dohfwd/engine"
)

// A scope's ECS policy, cookies and 0x20 reach the engine; the defaults
// are strip (or forward_ecs's pass), cookies on, 0x20 on.
func TestScopeUpstreamKeys(t *testing.T) {
	c, err := Parse("t.yaml", []byte(`engine:
  forward_ecs: true
scopes:
  - name: a
    servers: [192.0.2.1]
    ecs: strip
    upstream_cookies: false
    upstream_0x20: false
  - name: b
    servers: [192.0.2.2]
`))
	if err != nil {
		t.Fatal(err)
	}
	ec := c.EngineConfig()
	if !ec.UpstreamCookies || !ec.Upstream0x20 || !ec.ForwardECS {
		t.Fatalf("engine-wide: cookies %v 0x20 %v forward_ecs %v, want all on", ec.UpstreamCookies, ec.Upstream0x20, ec.ForwardECS)
	}
	a, b := ec.Scopes[0], ec.Scopes[1]
	if a.ECS != engine.ECSStrip || !a.NoUpstreamCookies || !a.NoUpstream0x20 {
		t.Fatalf("scope a: %+v", a)
	}
	if b.ECS != engine.ECSDefault || b.NoUpstreamCookies || b.NoUpstream0x20 {
		t.Fatalf("scope b: %+v", b)
	}
}

// An ECS policy the engine does not have is refused by file, line and key.
func TestScopeECSRefused(t *testing.T) {
	for _, v := range []string{"leak", "strip\n    ipv4_prefix: 20"} {
		_, err := Parse("t.yaml", []byte("scopes:\n  - name: a\n    servers: [192.0.2.1]\n    ecs: "+v+"\n"))
		if err == nil || !strings.Contains(err.Error(), "t.yaml:4: scopes[0].ecs") {
			t.Fatalf("ecs: %s: error %v, want one at t.yaml:4 naming scopes[0].ecs", v, err)
		}
	}
}
