// Package workers holds dohfwd's Cloudflare Workers glue (JavaScript, no
// Go); its test runs the glue and the real module under workerd.
package workers

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/config"
	"github.com/dohfwd/dohfwd/edge/moduletest"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
	"github.com/dohfwd/dohfwd/internal/testtool"
)

// workerdBinary finds workerd as `npm ci` installs it here, running npm ci
// when it is missing (scripts/setup.d/40-workerd.sh does the same).
func workerdBinary(t *testing.T) string {
	t.Helper()
	bin, _ := filepath.Abs(filepath.Join("node_modules", ".bin", "workerd"))
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	out, err := exec.Command("npm", "ci", "--no-audit", "--no-fund").CombinedOutput()
	if _, serr := os.Stat(bin); serr != nil {
		testtool.Missing(t, "workerd is not installed and `npm ci` in edge/workers failed (%v): %s\nthe Workers host is NOT tested", err, out)
	}
	return bin
}

// startWorkerd runs `workerd serve` on the repository's workerd.capnp with
// the glue, the module and configYAML, on a free loopback port, and
// returns the base URL.
func startWorkerd(t *testing.T, configYAML string) string {
	t.Helper()
	bin := workerdBinary(t)
	wasm, _ := moduletest.Build(t)
	dir := t.TempDir()
	for _, f := range []string{"workerd.capnp", "worker.mjs", "wasi.mjs", "sockets.mjs", "rfc8484.mjs"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "dohfwd.wasm"), wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	// DOHFWD_CONFIG is the configuration encoded, as `make workers-config`
	// writes it (the module reads no YAML).
	cfg, err := config.Parse("workerd test", []byte(configYAML))
	if err != nil {
		t.Fatal(err)
	}
	encoded, err := config.Encode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "dohfwd.config.json"), encoded, 0o644); err != nil {
		t.Fatal(err)
	}
	addr := upstreamtest.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "serve", "workerd.capnp", "--socket-addr", "http="+addr)
	cmd.Dir = dir
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		cmd.Wait()
		if t.Failed() {
			t.Logf("workerd output:\n%s", logs.String())
		}
	})
	for deadline := time.Now().Add(20 * time.Second); ; {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("workerd did not listen on %s: %v\n%s", addr, err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "http://" + addr
}

// try asks name with RFC 8484 GET or POST and returns the answer.
func try(method, base, name string) (*dns.Msg, error) {
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), dns.TypeA)
	q.Id = 0
	wire, _ := q.Pack()
	var req *http.Request
	if method == "GET" {
		req, _ = http.NewRequest("GET", base+"/dns-query?dns="+base64.RawURLEncoding.EncodeToString(wire), nil)
		req.Header.Set("Accept", "application/dns-message")
	} else {
		req, _ = http.NewRequest("POST", base+"/dns-query", bytes.NewReader(wire))
		req.Header.Set("Content-Type", "application/dns-message")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/dns-message" {
		return nil, fmt.Errorf("%s %s: HTTP %d %q: %s", method, name, resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	m := new(dns.Msg)
	if err := m.Unpack(body); err != nil {
		return nil, fmt.Errorf("not a DNS message: %w", err)
	}
	return m, nil
}

func ask(t *testing.T, method, base, name string) (*dns.Msg, time.Duration) {
	t.Helper()
	start := time.Now()
	m, err := try(method, base, name)
	if err != nil {
		t.Fatal(err)
	}
	return m, time.Since(start)
}

func checkA(m *dns.Msg, ip string) error {
	if m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 {
		return fmt.Errorf("want one answer, got\n%v", m)
	}
	if a, ok := m.Answer[0].(*dns.A); !ok || a.A.String() != ip {
		return fmt.Errorf("want A %s, got %v", ip, m.Answer[0])
	}
	return nil
}

func wantA(t *testing.T, m *dns.Msg, ip string) {
	t.Helper()
	if err := checkA(m, ip); err != nil {
		t.Fatal(err)
	}
}

// all asks n questions at once, the i-th for name(i) with GET or POST in
// turn, each expecting A ip, and returns how long they took together.
func all(t *testing.T, n int, base string, name func(i int) string, ip string) time.Duration {
	t.Helper()
	start := time.Now()
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			m, err := try([]string{"GET", "POST"}[i%2], base, name(i))
			if err == nil {
				err = checkA(m, ip)
			}
			if err != nil {
				errs <- fmt.Errorf("%s: %w", name(i), err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return time.Since(start)
}

func onlyTCP(t *testing.T, s *upstreamtest.Server) {
	t.Helper()
	for _, q := range s.Queries() {
		if q.Transport != "tcp" {
			t.Fatalf("upstream %s got a %s query: Workers have no UDP, the engine must use TCP only", s, q.Transport)
		}
	}
}

// TestWorkerd runs the module under workerd with TCP as its only transport.
// One workerd process serves two scopes: "plain" with one answering
// server, and "drop" whose first server drops every query.
func TestWorkerd(t *testing.T) {
	plain := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.1"))
	s1 := upstreamtest.Start(t, upstreamtest.Drop())
	s2 := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.2"))
	s3 := upstreamtest.Start(t, upstreamtest.Drop())
	s4 := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.4"))
	s5 := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.5"))
	refused := upstreamtest.FreeAddr(t)
	base := startWorkerd(t, fmt.Sprintf(`scopes:
  - name: plain
    domains: [plain.test]
    servers: [%q]
  - name: drop
    domains: [drop.test]
    servers: [%q, %q]
  - name: slow
    domains: [slow.test]
    servers: [%q, %q]
  - name: refused
    domains: [refused.test]
    servers: [%q, %q]
fallback_servers: []
cache:
  max_entries: 0
log:
  level: warn
`, plain, s1, s2, s3, s4, refused, s5))

	// Several requests in flight at once in the one instance of the
	// isolate: GETs and POSTs side by side.
	t.Run("GET and POST over TCP", func(t *testing.T) {
		m, took := ask(t, "GET", base, "www.plain.test")
		wantA(t, m, "192.0.2.1")
		t.Logf("GET (first request, instantiates the module): %v", took)
		m, took = ask(t, "POST", base, "mail.plain.test")
		wantA(t, m, "192.0.2.1")
		t.Logf("POST: %v", took)
		took = all(t, 20, base, func(i int) string { return fmt.Sprintf("n%d.plain.test", i) }, "192.0.2.1")
		t.Logf("20 GETs and POSTs at once: %v", took)
		if n := len(plain.Queries()); n != 22 {
			t.Fatalf("upstream read %d queries, want 22", n)
		}
		onlyTCP(t, plain)
	})

	// engine-servers.server-choice-rule, engine-servers.transaction-timeout:
	// the dropping first server costs the 2 s timeout, then the second
	// answers, for each of several questions in flight at once; the
	// questions after them go to the second server first
	// (engine-servers.healthy-first-then-demoted): the isolate's one
	// engine keeps the mark for every request.
	t.Run("dropping first server moves on after 2 s", func(t *testing.T) {
		const n = 5
		took := all(t, n, base, func(i int) string { return fmt.Sprintf("one%d.drop.test", i) }, "192.0.2.2")
		q1, q2 := s1.Queries(), s2.Queries()
		if len(q1) != n || len(q2) != n {
			t.Fatalf("first server read %d queries, second %d; want %d and %d", len(q1), len(q2), n, n)
		}
		for i := range q2 {
			gap := q2[i].At.Sub(q1[0].At)
			if gap < 1900*time.Millisecond || gap > 3500*time.Millisecond {
				t.Fatalf("second server asked %v after the first; want the 2 s transaction timeout", gap)
			}
		}
		t.Logf("%d questions at once moved to the second server after %v; all answered in %v", n, q2[0].At.Sub(q1[0].At), took)

		took = all(t, n, base, func(i int) string { return fmt.Sprintf("two%d.drop.test", i) }, "192.0.2.2")
		if len(s1.Queries()) != n || len(s2.Queries()) != 2*n {
			t.Fatalf("after demotion: first server read %d, second %d; want %d and %d", len(s1.Queries()), len(s2.Queries()), n, 2*n)
		}
		if took > time.Second {
			t.Fatalf("questions after the demotion took %v; none should wait for the dropping server", took)
		}
		onlyTCP(t, s1)
		onlyTCP(t, s2)
	})

	// A slow question (its first server drops) and fast ones side by side:
	// the fast requests end while the slow one waits, and the slow one
	// still moves on at its 2 s, though the isolate's timer and sockets
	// may have been set up while serving the requests that ended.
	t.Run("slow and fast requests at once", func(t *testing.T) {
		slow := make(chan error, 1)
		start := time.Now()
		go func() {
			m, err := try("GET", base, "www.slow.test")
			if err == nil {
				err = checkA(m, "192.0.2.4")
			}
			slow <- err
		}()
		all(t, 10, base, func(i int) string { return fmt.Sprintf("fast%d.plain.test", i) }, "192.0.2.1")
		fast := time.Since(start)
		if err := <-slow; err != nil {
			t.Fatalf("the slow question: %v", err)
		}
		took := time.Since(start)
		if took < 1900*time.Millisecond || took > 3500*time.Millisecond {
			t.Fatalf("the slow question took %v; want its first server's 2 s timeout, then the second's answer", took)
		}
		if len(s3.Queries()) != 1 || len(s4.Queries()) != 1 {
			t.Fatalf("the slow scope's servers read %d and %d queries; want 1 and 1", len(s3.Queries()), len(s4.Queries()))
		}
		t.Logf("fast questions done in %v, the slow one in %v", fast, took)
	})

	// The module sends its query and names its read in the poll that
	// opens the connection (package abi); the glue writes and reads once
	// connected. A connect that fails still ends the attempt at once
	// (engine-servers.server-choice-rule): the first server refuses, the
	// second answers, without the 2 s timeout.
	t.Run("refused connect moves on at once", func(t *testing.T) {
		m, took := ask(t, "GET", base, "www.refused.test")
		wantA(t, m, "192.0.2.5")
		if took > time.Second {
			t.Fatalf("took %v: a refused connect must fail its attempt at once", took)
		}
		if n := len(s5.Queries()); n != 1 {
			t.Fatalf("second server read %d queries, want 1", n)
		}
		onlyTCP(t, s5)
	})

	t.Run("bad input answered by the module", func(t *testing.T) {
		resp, err := http.Get(base + "/dns-query?dns=!!!")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("bad dns parameter: HTTP %d, want 400", resp.StatusCode)
		}
		if strings.Contains(resp.Header.Get("Content-Type"), "dns-message") {
			t.Fatalf("a 400 carries no DNS message")
		}
	})
}
