//go:build !wasip1

package config

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/dohfwd/dohfwd/engine/blocklist"
)

// UnmarshalYAML reads a policy as its fields say, and then its action
// once more: YAML reads an unquoted `action: null` as no value at all,
// which would be the default (nxdomain), the opposite of what was
// written. The decoder never hands a null node to an unmarshaler of its
// own, so the policy, whose mapping holds that node, looks at it: a null
// written as the word null is the null action; `action:` or `~` stays the
// default.
func (p *Policy) UnmarshalYAML(n *yaml.Node) error {
	type fields Policy // without this method
	if err := n.Decode((*fields)(p)); err != nil {
		return err
	}
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Value == "action" && v.Kind == yaml.ScalarNode && v.ShortTag() == "!!null" && strings.EqualFold(v.Value, "null") {
			p.Action = "null"
		}
	}
	return nil
}

// checkPolicyFiles refuses a policy list file that cannot be read (a
// missing file, a folder), naming its key and line. Natively only: the
// WebAssembly module gets its lists from its host.
func (c *Config) checkPolicyFiles(x *keyIndex) error {
	var es errs
	check := func(key, file string) {
		fi, err := os.Stat(file)
		switch {
		case err != nil:
			es.add(x.errorAt(c.Source, key, err.Error()))
		case fi.IsDir():
			es.add(x.errorAt(c.Source, key, file+": a folder, not a list file"))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.Policies)) {
		p := c.Policies[name]
		for i, f := range p.Block {
			if f != "" {
				check(fmt.Sprintf("policies.%s.block[%d]", name, i), f)
			}
		}
		for i, a := range p.Allow {
			if blocklist.IsFile(a) {
				check(fmt.Sprintf("policies.%s.allow[%d]", name, i), a)
			}
		}
	}
	return es.join()
}
