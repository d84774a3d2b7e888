//go:build !wasip1

package doh

import (
	"encoding/xml"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/dohfwd/dohfwd/scripts/testtool"
)

// notApplicable lists the h2spec cases a listener is not held to, by
// listener and the case's id (section and number, as h2spec's report
// names them), with the reason.
var notApplicable = map[string]string{
	"h2c 3.5. HTTP/2 Connection Preface/2": "the plaintext listener serves HTTP/1.1 and h2c on one port: " +
		"a connection that does not start with the HTTP/2 preface is an HTTP/1.1 connection by design, " +
		"and net/http answers the invalid request line with 400 and closes it",
}

// h2specPath finds h2spec (scripts/setup.d/20-h2spec.sh installs it); a
// missing h2spec fails the test under CI (testtool.Find).
func h2specPath(t *testing.T) string {
	t.Helper()
	return testtool.Find(t, "h2spec", "scripts/setup.d/20-h2spec.sh installs it")
}

// TestH2Spec runs h2spec, a real HTTP/2 conformance suite, against the
// TLS listener and the h2c (plaintext, prior knowledge) listener. Every
// case passes except those in notApplicable.
func TestH2Spec(t *testing.T) {
	bin := h2specPath(t)
	base, _ := startTLS(t, NewHandler(&recordingResolver{}, Options{}), Limits{})
	plain := startPlain(t, NewHandler(&recordingResolver{}, Options{}))
	for _, tc := range []struct {
		name string
		addr string
		tls  bool
	}{
		{"tls", strings.TrimPrefix(base, "https://"), true},
		{"h2c", strings.TrimPrefix(plain, "http://"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			host, port, _ := net.SplitHostPort(tc.addr)
			report := filepath.Join(t.TempDir(), "report.xml")
			args := []string{"-h", host, "-p", port, "-j", report, "-o", "3"}
			if tc.tls {
				args = append(args, "-t", "-k")
			}
			out, err := exec.Command(bin, args...).CombinedOutput()
			failed, passed := h2specFailures(t, report)
			t.Logf("h2spec %s: %d passed, %d failed (exit %v)", tc.name, passed, len(failed), err)
			for id, msg := range failed {
				if why, ok := notApplicable[tc.name+" "+id]; ok {
					t.Logf("not applicable: %s: %s", id, why)
					continue
				}
				t.Errorf("h2spec %s: %s", id, msg)
			}
			if passed == 0 {
				t.Fatalf("h2spec ran no case:\n%s", out)
			}
		})
	}
}

type junitSuites struct {
	Suites []struct {
		Name  string `xml:"name,attr"`
		Cases []struct {
			Name    string `xml:"name,attr"`
			Package string `xml:"package,attr"`
			Failure *struct {
				Text string `xml:",chardata"`
			} `xml:"failure"`
			Error *struct {
				Text string `xml:",chardata"`
			} `xml:"error"`
			Skipped *struct{} `xml:"skipped"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

// h2specFailures reads h2spec's JUnit report: the failed cases by id
// ("http2/5.1/3" and the like) and how many passed.
func h2specFailures(t *testing.T, path string) (failed map[string]string, passed int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("h2spec report: %v", err)
	}
	var r junitSuites
	if err := xml.Unmarshal(b, &r); err != nil {
		t.Fatalf("h2spec report: %v", err)
	}
	failed = map[string]string{}
	for _, s := range r.Suites {
		for i, c := range s.Cases {
			id := s.Name + "/" + strconv.Itoa(i+1)
			switch {
			case c.Failure != nil:
				failed[id] = c.Name + ": " + strings.TrimSpace(c.Failure.Text)
			case c.Error != nil:
				failed[id] = c.Name + ": " + strings.TrimSpace(c.Error.Text)
			case c.Skipped != nil:
			default:
				passed++
			}
		}
	}
	return failed, passed
}
