//go:build !wasip1

package config

import (
	"fmt"
	"maps"
	"os"
	"slices"

	"github.com/dohfwd/dohfwd/engine/blocklist"
)

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
