package main

import (
	"bufio"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/edge/moduletest"
)

// dohfwd-edge (the wazero host) and dohfwd serve, on the same
// configuration and asked the same questions, serve /status documents with
// the same keys and /metrics with the same series: a counter or a status
// key added to one host cannot be missing from the other. Values may
// differ; keys may not.
func TestEdgeAndServeStatusHaveTheSameKeys(t *testing.T) {
	upstream := startNSD(t)
	pki := newPKI(t)
	yaml := scopeYAML(upstream)

	edgeBinary := filepath.Join(t.TempDir(), "dohfwd-edge")
	if out, err := exec.Command("go", "build", "-ldflags", "-X main.version="+testVersion, "-o", edgeBinary, "../dohfwd-edge").CombinedOutput(); err != nil {
		t.Fatalf("building dohfwd-edge: %v\n%s", err, out)
	}
	_, module := moduletest.Build(t)
	cacheDir := moduletest.CacheDir(t)

	serve := startDohfwd(t, yaml, pki)
	// Without a compiled module in the cache, wazero compiles it first.
	edge := startCommand(t, yaml, pki, 3*time.Minute, func(config string) *exec.Cmd {
		return exec.Command(edgeBinary, "--config", config, "--module", module, "--cache-dir", cacheDir)
	})
	for _, d := range []*dohfwd{serve, edge} {
		c := d.client()
		for _, q := range []*dns.Msg{newQuery("www.e2e.test", dns.TypeA), newQuery("www.e2e.test", dns.TypeA),
			newQuery("missing.e2e.test", dns.TypeA)} {
			if res, m := d.query(c, q); res.StatusCode != 200 || m == nil {
				t.Fatalf("%s: status %d", q.Question[0].Name, res.StatusCode)
			}
		}
	}

	statusKeys := func(d *dohfwd) []string { return flatKeys("", any(d.status())) }
	if s, e := statusKeys(serve), statusKeys(edge); !slices.Equal(s, e) {
		t.Errorf("/status keys differ:\nonly dohfwd serve: %v\nonly dohfwd-edge:  %v", minus(s, e), minus(e, s))
	}
	if s, e := metricSeries(t, serve), metricSeries(t, edge); !slices.Equal(s, e) {
		t.Errorf("/metrics series differ:\nonly dohfwd serve: %v\nonly dohfwd-edge:  %v", minus(s, e), minus(e, s))
	}
}

// flatKeys lists the paths of v's leaves, sorted and unique: maps by key
// ("counters.attempts.answer"), a list's elements as "[]".
func flatKeys(prefix string, v any) []string {
	var out []string
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			out = append(out, flatKeys(p, x)...)
		}
	case []any:
		for _, x := range v {
			out = append(out, flatKeys(prefix+"[]", x)...)
		}
		if len(v) == 0 {
			out = append(out, prefix+"[]")
		}
	default:
		out = append(out, prefix)
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// metricSeries lists the series of d's /metrics, sorted: the name and
// labels of each sample line, without its value. The Go and process
// collectors' series are the Go runtime's, the same in both.
func metricSeries(t *testing.T, d *dohfwd) []string {
	t.Helper()
	res, err := http.Get("http://" + d.Admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out []string
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, line[:strings.LastIndexByte(line, ' ')])
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// minus is what a has and b has not.
func minus(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}
