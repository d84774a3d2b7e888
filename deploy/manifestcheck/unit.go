package manifestcheck

import (
	"bufio"
	"bytes"
	"fmt"
	"strings"
)

// UnitDirectives parses a systemd unit into section.key → values.
func UnitDirectives(unit []byte) map[string][]string {
	out := map[string][]string{}
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(unit))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[':
			section = strings.Trim(line, "[]")
		default:
			if k, v, ok := strings.Cut(line, "="); ok {
				key := section + "." + strings.TrimSpace(k)
				out[key] = append(out[key], strings.TrimSpace(v))
			}
		}
	}
	return out
}

// requiredHardening is what the dohfwd unit must say, and the value.
var requiredHardening = map[string]string{
	"Service.DynamicUser":           "yes",
	"Service.AmbientCapabilities":   "CAP_NET_BIND_SERVICE",
	"Service.CapabilityBoundingSet": "CAP_NET_BIND_SERVICE",
	"Service.NoNewPrivileges":       "yes",
	"Service.ProtectSystem":         "strict",
	"Service.ProtectHome":           "yes",
	"Service.PrivateTmp":            "yes",
	"Service.PrivateDevices":        "yes",
	"Service.KillSignal":            "SIGTERM",
	"Service.StateDirectory":        "dohfwd",
}

// CheckUnit returns what the unit lacks of the hardening dohfwd promises.
func CheckUnit(unit []byte) []error {
	d := UnitDirectives(unit)
	var errs []error
	for key, want := range requiredHardening {
		if v := d[key]; len(v) == 0 || v[len(v)-1] != want {
			errs = append(errs, fmt.Errorf("unit: %s=%s missing (have %v)", key, want, v))
		}
	}
	if len(d["Service.ExecStart"]) != 1 || !strings.Contains(d["Service.ExecStart"][0], "dohfwd serve --config ") {
		errs = append(errs, fmt.Errorf("unit: ExecStart must run dohfwd serve --config FILE"))
	}
	return errs
}
