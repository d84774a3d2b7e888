// Package buildinfo says which build of dohfwd is running, for the log,
// the admin endpoints and `dohfwd version`; the dohfwd and dohfwd-edge
// binaries share it.
package buildinfo

import "runtime/debug"

// Version returns set (the -ldflags "-X main.version=..." value) when it
// is not empty, else the VCS revision the binary was built from
// ("dev-<12 hex>", "-dirty" when the tree had changes), else the module's
// version, else "dev".
func Version(set string) string {
	if set != "" {
		return set
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		rev, dirty := "", false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if rev != "" {
			if len(rev) > 12 {
				rev = rev[:12]
			}
			if dirty {
				rev += "-dirty"
			}
			return "dev-" + rev
		}
		if bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			return bi.Main.Version
		}
	}
	return "dev"
}
