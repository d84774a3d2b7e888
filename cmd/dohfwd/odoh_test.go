package main

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// An Oblivious DoH deployment as an operator builds it: a dohfwd target
// in front of nsd, a dohfwd relay in front of the target, and
// `dohfwd odoh-query` asking through both, all real processes on
// loopback over HTTP/2 (and HTTP/3 where a test says so).

// odohTarget runs a dohfwd ODoH target whose upstream is nsd.
func odohTarget(t *testing.T, pki *testPKI, nsd string, extra string) *dohfwd {
	t.Helper()
	return startDohfwd(t, scopeYAML(nsd)+"odoh:\n  target: true\n"+extra, pki)
}

// odohRelay runs a dohfwd ODoH relay to targets (host:port), trusting
// pki's CA for them.
func odohRelay(t *testing.T, pki *testPKI, nsd string, extra string, targets ...string) *dohfwd {
	t.Helper()
	return startDohfwd(t, scopeYAML(nsd)+fmt.Sprintf("odoh:\n  relay: true\n  targets: [%s]\n  ca_root: %s\n",
		strings.Join(targets, ", "), pki.CA)+extra, pki)
}

// odohQuery runs `dohfwd odoh-query args...` and returns its exit code,
// stdout and stderr.
func odohQuery(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"odoh-query"}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), out.String(), errb.String()
		} else if err != nil {
			t.Fatal(err)
		}
		return 0, out.String(), errb.String()
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("dohfwd odoh-query %s: timed out", strings.Join(args, " "))
	}
	return -1, "", ""
}

// questionEvents are d's question events for qname.
func questionEvents(d *dohfwd, qname string) []map[string]any {
	return d.Events(func(ev map[string]any) bool { return ev["message"] == "question" && ev["qname"] == qname })
}

// TestODoHQueryThroughDohfwdRelayAndTarget: `dohfwd odoh-query` asks
// through a dohfwd relay to a dohfwd target in front of nsd and prints
// nsd's answer as dig +short does, the whole message with --full, and an
// rcode other than NOERROR on stderr with exit 0; the target resolved
// each question for no client, proto odoh.
func TestODoHQueryThroughDohfwdRelayAndTarget(t *testing.T) {
	t.Parallel()
	pki := newPKI(t)
	nsd := startNSD(t)
	target := odohTarget(t, pki, nsd, "")
	relay := odohRelay(t, pki, nsd, "", target.HTTPS)
	via := []string{"--target", target.URL(), "--relay", "https://" + relay.HTTPS + "/proxy", "--ca", pki.CA}

	code, out, errs := odohQuery(t, append(via, "www.e2e.test")...)
	if code != 0 || out != "127.0.0.1\n" {
		t.Fatalf("www.e2e.test A: exit %d, stdout %q, stderr %q; want 127.0.0.1", code, out, errs)
	}
	code, out, errs = odohQuery(t, append(via, "v6.e2e.test", "aaaa")...)
	if code != 0 || out != "2001:db8::1\n" {
		t.Fatalf("v6.e2e.test AAAA: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	code, out, errs = odohQuery(t, append(via, "--full", "www.example.com", "AAAA")...)
	if code != 0 || !strings.Contains(out, "status: NOERROR") || !strings.Contains(out, "www.example.com.\t300\tIN\tAAAA\t2001:db8::10") ||
		!strings.Contains(out, ";; QUESTION SECTION:") {
		t.Fatalf("--full: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	code, out, errs = odohQuery(t, append(via, "nope.e2e.test")...)
	if code != 0 || out != "" || !strings.Contains(errs, "status NXDOMAIN") {
		t.Fatalf("NXDOMAIN: exit %d, stdout %q, stderr %q", code, out, errs)
	}

	for _, qname := range []string{"www.e2e.test.", "v6.e2e.test.", "www.example.com.", "nope.e2e.test."} {
		target.waitEvent(10*time.Second, func(ev map[string]any) bool { return ev["message"] == "question" && ev["qname"] == qname })
		evs := questionEvents(target, qname)
		if len(evs) != 1 {
			t.Fatalf("target: %d question events for %s, want 1", len(evs), qname)
		}
		if ev := evs[0]; ev["proto"] != "odoh" || ev["client"] != nil {
			t.Errorf("target's question event for %s: %v; want proto odoh and no client", qname, ev)
		}
	}
	if evs := relay.Events(func(ev map[string]any) bool { return ev["message"] == "question" }); len(evs) != 0 {
		t.Errorf("the relay resolved questions: %v", evs)
	}
}

// TestODoHQueryCommandLine: a bad command line exits 2 with the usage; a
// relay that refuses the target exits 1 with the relay's status and short
// reason.
func TestODoHQueryCommandLine(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"www.e2e.test"},
		{"--target", "https://127.0.0.1:1/dns-query"},
		{"--target", "http://127.0.0.1:1/dns-query", "www.e2e.test"},
		{"--target", "https://127.0.0.1:1/dns-query", "www.e2e.test", "NOTATYPE"},
		{"--target", "https://127.0.0.1:1/dns-query", "--relay", "ftp://x/proxy", "www.e2e.test"},
	} {
		if code, _, errs := odohQuery(t, args...); code != 2 || errs == "" {
			t.Errorf("%q: exit %d, stderr %q; want 2 and why", args, code, errs)
		}
	}
	pki := newPKI(t)
	nsd := startNSD(t)
	target := odohTarget(t, pki, nsd, "")
	relay := odohRelay(t, pki, nsd, "", "elsewhere.example:443")
	code, out, errs := odohQuery(t, "--target", target.URL(), "--relay", "https://"+relay.HTTPS+"/proxy", "--ca", pki.CA, "www.e2e.test")
	if code != 1 || out != "" || !strings.Contains(errs, "403 Forbidden: odoh relay: target not allowed") {
		t.Fatalf("target off the relay's list: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}
