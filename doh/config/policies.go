package config

import (
	"fmt"
	"maps"
	"slices"

	"github.com/dohfwd/dohfwd/engine/blocklist"
)

// Policy is one entry of `policies:`.
type Policy struct {
	// Block are list files: hosts, plain domains, adblock rules or RPZ
	// zones, recognised line by line (engine/blocklist).
	Block []string `yaml:"block"`
	// Allow are domains let through whatever a block list says (with
	// their subdomains), or list files (an entry with a slash: ./allow.txt)
	// whose every rule allows.
	Allow []string `yaml:"allow"`
	// Action answers a blocked question: nxdomain ("" too), null (0.0.0.0
	// and ::) or refused. An RPZ rule carries its own.
	Action string `yaml:"action"`
}

// checkPolicies checks what can be checked without the file system: the
// names, the actions, the allow entries that are domains. Parse checks
// that each list file can be read (checkPolicyFiles).
func (c *Config) checkPolicies(bad func(path, format string, a ...any)) {
	if c.PoliciesReload < 0 {
		bad("policies_reload", "%v: must not be negative", c.PoliciesReload)
	}
	for _, name := range slices.Sorted(maps.Keys(c.Policies)) {
		p := c.Policies[name]
		key := "policies." + name
		if !policyName(name) {
			bad(key, "%q: a policy name is letters, digits, - and _ (at most 63)", name)
		}
		if _, err := blocklist.ParseAction(p.Action); err != nil {
			bad(key+".action", "%v", err)
		}
		for i, f := range p.Block {
			if f == "" {
				bad(fmt.Sprintf("%s.block[%d]", key, i), "empty file name")
			}
		}
		for i, a := range p.Allow {
			if blocklist.IsFile(a) {
				continue
			}
			if _, err := blocklist.ParseName(a); err != nil {
				bad(fmt.Sprintf("%s.allow[%d]", key, i), "%v (a file is written with a slash: ./%s)", err, a)
			}
		}
	}
}

// policyName says whether s may name a policy: what a device's id may be
// (a hostname label), and _.
func policyName(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// PolicySpecs are the configured policies as package blocklist compiles
// them, sorted by name. The configuration is checked: an action is valid.
func (c *Config) PolicySpecs() []blocklist.Spec {
	out := make([]blocklist.Spec, 0, len(c.Policies))
	for _, name := range slices.Sorted(maps.Keys(c.Policies)) {
		p := c.Policies[name]
		action, _ := blocklist.ParseAction(p.Action)
		out = append(out, blocklist.Spec{Name: name, Block: slices.Clone(p.Block), Allow: slices.Clone(p.Allow), Action: action})
	}
	return out
}
