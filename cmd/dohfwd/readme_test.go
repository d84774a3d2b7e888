package main

import (
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// readmeExamples returns the command lines of README.md's tested examples.
func readmeExamples(t *testing.T) []string {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	begin, end := strings.Index(s, "<!-- examples:begin -->"), strings.Index(s, "<!-- examples:end -->")
	if begin < 0 || end < begin {
		t.Fatal("README.md has no examples:begin/end block")
	}
	var out []string
	for _, l := range strings.Split(s[begin:end], "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "```") && !strings.HasPrefix(l, "<!--") {
			out = append(out, l)
		}
	}
	return out
}

// The README's copy-paste examples, exactly as written but for the
// ports, run against the binary on its default self-signed certificate.
func TestReadmeExamples(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"curl", "dig", "kdig", "od", "base64"} {
		needTool(t, tool)
	}
	nsd := startNSD(t)
	d := startDohfwd(t, scopeYAML(nsd), nil) // tls.mode self-signed, as make run
	_, port, _ := net.SplitHostPort(d.HTTPS)
	examples := readmeExamples(t)
	if len(examples) < 8 {
		t.Fatalf("only %d examples in README.md", len(examples))
	}
	seen := map[string]bool{}
	for _, ex := range examples {
		cmdline := strings.NewReplacer("127.0.0.1:8443", d.HTTPS, "-p 8443", "-p "+port, "127.0.0.1:9153", d.Admin).Replace(ex)
		if strings.HasPrefix(cmdline, "dohfwd ") {
			cmdline = binary + cmdline[len("dohfwd"):]
		}
		seen[strings.Fields(ex)[0]] = true
		out, err := exec.Command("bash", "-o", "pipefail", "-c", cmdline).CombinedOutput()
		if err != nil || len(out) == 0 {
			t.Errorf("%s\n%v\n%s", ex, err, out)
			continue
		}
		text := string(out)
		switch {
		case strings.Contains(ex, "dns-json"):
			if !strings.Contains(text, `"Status":0`) || !(strings.Contains(text, "192.0.2.10") || strings.Contains(text, "2001:db8::10")) {
				t.Errorf("%s:\n%s", ex, text)
			}
		case strings.HasPrefix(ex, "dig") || strings.HasPrefix(ex, "kdig"):
			if !strings.Contains(text, "NOERROR") || !(strings.Contains(text, "192.0.2.10") || strings.Contains(text, "2001:db8::10")) {
				t.Errorf("%s:\n%s", ex, text)
			}
		case strings.Contains(ex, "| od"):
			// The answer's header: ID 0, QR set, NOERROR.
			if f := strings.Fields(text); len(f) < 4 || f[0] != "00" || f[1] != "00" || !strings.HasPrefix(f[2], "8") || f[3][1] != '0' {
				t.Errorf("%s:\n%s", ex, text)
			}
		case strings.Contains(ex, "/metrics"):
			if !strings.Contains(text, "dohfwd_upstream_failed_total") || !strings.Contains(text, "dohfwd_refused_total") {
				t.Errorf("%s:\n%s", ex, text)
			}
		}
	}
	for _, tool := range []string{"curl", "dig", "kdig", "dohfwd"} {
		if !seen[tool] {
			t.Errorf("README.md examples never use %s", tool)
		}
	}
}
