// Package workers holds dohfwd's Cloudflare Workers glue (JavaScript, no
// Go); its test runs the glue and the real module under workerd.
package workers

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/doh/config"
	"github.com/dohfwd/dohfwd/edge/abi"
	"github.com/dohfwd/dohfwd/edge/moduletest"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
	"github.com/dohfwd/dohfwd/scripts/testtool"
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

// statusPath is where the glue serves the module's status in the tests
// (DOHFWD_STATUS_PATH).
const statusPath = "/.dohfwd/status"

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
	// The test reads the module's status (statusPath) through the glue.
	capnp, _ := os.ReadFile(filepath.Join(dir, "workerd.capnp"))
	const binding = `(name = "DOHFWD_CONFIG", text = embed "dohfwd.config.json"),`
	if !bytes.Contains(capnp, []byte(binding)) {
		t.Fatalf("workerd.capnp has no %s", binding)
	}
	capnp = bytes.Replace(capnp, []byte(binding), []byte(binding+"\n    (name = \"DOHFWD_STATUS_PATH\", text = \""+statusPath+"\"),"), 1)
	if err := os.WriteFile(filepath.Join(dir, "workerd.capnp"), capnp, 0o644); err != nil {
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
	nx := upstreamtest.Start(t, func(q upstreamtest.Query) upstreamtest.Action {
		if q.Msg == nil {
			return upstreamtest.Action{}
		}
		m := upstreamtest.ReplyTo(q.Msg, dns.RcodeNameError)
		soa, _ := dns.NewRR("nx.test. 300 IN SOA ns.nx.test. host.nx.test. 1 7200 900 1209600 30")
		m.Ns = append(m.Ns, soa)
		return upstreamtest.Action{Replies: []upstreamtest.Reply{{Msg: m}}}
	})
	sf := upstreamtest.Start(t, upstreamtest.Rcode(dns.RcodeServerFailure))
	// silent.cancel.test is never answered; every other name is.
	cancelled := upstreamtest.Start(t, func(q upstreamtest.Query) upstreamtest.Action {
		if q.Msg != nil && len(q.Msg.Question) == 1 && strings.EqualFold(q.Msg.Question[0].Name, "silent.cancel.test.") {
			return upstreamtest.Action{}
		}
		return upstreamtest.Answer("@ 60 IN A 192.0.2.6")(q)
	})
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
  - name: nx
    domains: [nx.test]
    servers: [%q]
  - name: servfail
    domains: [sf.test]
    servers: [%q]
  - name: cancel
    domains: [cancel.test]
    servers: [%q]
fallback_servers: []
cache:
  max_entries: 0
log:
  level: warn
`, plain, s1, s2, s3, s4, refused, s5, nx, sf, cancelled))
	// The defaults are on: Server-Timing and trace context, which the
	// glue writes itself for the questions it sends.
	if st := status(t, base); !st.Front.Questions || st.Front.Path != "/dns-query" || !st.Front.ServerTiming || !st.Front.TraceContext {
		t.Fatalf("the module's front: %+v; want questions at /dns-query with Server-Timing and trace context", st.Front)
	}

	// Several requests in flight at once in the one instance of the
	// isolate: GETs and POSTs side by side. Each is a TCP miss the module
	// finishes in the poll that brings its reply (engine.FinishWithReply), with no
	// goroutine of its own parked or woken.
	t.Run("GET and POST over TCP", func(t *testing.T) {
		before := status(t, base)
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
		after := status(t, base)
		if f, w := after.Queries.Finished-before.Queries.Finished, after.Queries.Waited-before.Queries.Waited; f != 22 || w != 0 {
			t.Fatalf("questions the module answered %+v -> %+v: want the 22 misses finished in a poll, none on a worker", before.Queries, after.Queries)
		}
		if n := after.Parked - before.Parked; n != 0 {
			t.Fatalf("the module's goroutines parked %d times for 22 TCP misses, want 0", n)
		}
	})

	// Identical questions from many clients at once: a follower of a
	// coalesced question has no socket of its own, its answer comes from
	// the leader's poll, so nothing of its own is pending in its
	// request's context, and workerd cancels such a request as hung (5xx)
	// unless the glue keeps a timer for it there.
	t.Run("coalesced questions from 50 clients, none cancelled", func(t *testing.T) {
		errs := make(chan error, 50)
		var wg sync.WaitGroup
		for w := range 50 {
			wg.Go(func() {
				for i := range 40 {
					name := fmt.Sprintf("c%d.plain.test", i)
					m, err := try([]string{"GET", "POST"}[(w+i)%2], base, name)
					if err == nil {
						err = checkA(m, "192.0.2.1")
					}
					if err != nil {
						errs <- fmt.Errorf("client %d: %s: %w", w, name, err)
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
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
		before := status(t, base)
		m, took := ask(t, "GET", base, "www.refused.test")
		wantA(t, m, "192.0.2.5")
		if took > time.Second {
			t.Fatalf("took %v: a refused connect must fail its attempt at once", took)
		}
		if n := len(s5.Queries()); n != 1 {
			t.Fatalf("second server read %d queries, want 1", n)
		}
		onlyTCP(t, s5)
		// The failure is the connect's (EventConnected), not the read's.
		b, c := before.Counters.Attempts, status(t, base).Counters.Attempts
		if n := c["connect_error"] - b["connect_error"]; n != 1 || c["recv_error"] != b["recv_error"] {
			t.Fatalf("attempts %v -> %v: want one more connect_error and no recv_error", b, c)
		}
	})

	// A plain RFC 8484 request goes to the module as its question
	// (abi.EventQuery) and the glue writes the response; the same request
	// made slightly odd (another query parameter, a Content-Type with a
	// parameter) goes whole to the module's DoH handler. Both answers must
	// be the same: status, headers, body.
	t.Run("plain requests answered by the glue as the module does", func(t *testing.T) {
		before := status(t, base).Queries
		cases := []struct {
			name, cacheControl string
			rcode              int
		}{
			{"www.plain.test", "max-age=60", dns.RcodeSuccess},
			{"www.nx.test", "max-age=30", dns.RcodeNameError}, // RFC 2308: the SOA's MINIMUM
			{"www.sf.test", "no-store", dns.RcodeServerFailure},
		}
		fast := 0
		for _, tc := range cases {
			for _, method := range []string{"GET", "POST"} {
				wire := packQuery(t, tc.name, dns.TypeA)
				f := exchange(t, method, base, wire, false)
				fast++
				m := exchange(t, method, base, wire, true)
				if f.status != http.StatusOK || f.header.Get("Content-Type") != "application/dns-message" ||
					f.header.Get("Cache-Control") != tc.cacheControl || f.header.Get("Vary") != "Accept" {
					t.Fatalf("%s %s: HTTP %d %v; want 200 application/dns-message, Cache-Control %s, Vary Accept", method, tc.name, f.status, f.header, tc.cacheControl)
				}
				if got := rcodeOf(t, f.body); got != tc.rcode {
					t.Fatalf("%s %s: rcode %s, want %s", method, tc.name, dns.RcodeToString[got], dns.RcodeToString[tc.rcode])
				}
				sameResponse(t, method+" "+tc.name, f, m)
			}
		}
		after := status(t, base).Queries
		if n := answered(after) - answered(before); n != uint64(fast) {
			t.Fatalf("the module answered %d questions (EventQuery); want the %d plain requests, and none of the odd ones", n, fast)
		}
	})

	t.Run("odd requests answered by the module", func(t *testing.T) {
		before := status(t, base).Queries
		// Bad base64, and good characters of a bad length: doh's 400.
		for _, param := range []string{"!!!", "A"} {
			r := get(t, base+"/dns-query?dns="+param, nil)
			if r.status != http.StatusBadRequest || string(r.body) != "bad dns parameter: not base64url\n" ||
				r.header.Get("Content-Type") != "text/plain; charset=utf-8" || r.header.Get("Cache-Control") != "no-store" ||
				r.header.Get("X-Content-Type-Options") != "nosniff" {
				t.Fatalf("?dns=%s: HTTP %d %v %q; want doh's 400 for a bad dns parameter", param, r.status, r.header, r.body)
			}
		}
		// The JSON form, at its path and at the DoH path.
		for _, target := range []string{"/resolve?name=json.plain.test&type=A", "/dns-query?name=json2.plain.test"} {
			r := get(t, base+target, http.Header{"Accept": {"application/dns-json"}})
			if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/dns-json" || !bytes.Contains(r.body, []byte("192.0.2.1")) {
				t.Fatalf("%s: HTTP %d %v %s; want the JSON answer", target, r.status, r.header, r.body)
			}
		}
		// A query that is not plain (an ECS option): the module reads it
		// through and answers it.
		q := new(dns.Msg)
		q.SetQuestion("ecs.plain.test.", dns.TypeA)
		q.Id = 0
		q.SetEdns0(1232, false)
		q.IsEdns0().Option = append(q.IsEdns0().Option, &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: 24, Address: net.IPv4(198, 51, 100, 0)})
		wire, _ := q.Pack()
		r := exchange(t, "GET", base, wire, false)
		if r.status != http.StatusOK || rcodeOf(t, r.body) != dns.RcodeSuccess {
			t.Fatalf("a query with ECS: HTTP %d %s", r.status, r.body)
		}
		// Another path, another media type.
		if r := get(t, base+"/elsewhere", nil); r.status != http.StatusNotFound {
			t.Fatalf("/elsewhere: HTTP %d, want 404", r.status)
		}
		resp, err := http.Post(base+"/dns-query", "text/plain", bytes.NewReader(wire))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnsupportedMediaType {
			t.Fatalf("POST text/plain: HTTP %d, want 415", resp.StatusCode)
		}
		after := status(t, base).Queries
		if after != before {
			t.Fatalf("the module answered questions (EventQuery) %+v -> %+v; every odd request must go to it whole", before, after)
		}
	})

	// A client that goes away from a plain request (a question to the
	// module) whose server stays silent: the instance keeps answering the
	// next question at once, and the abandoned one ends and leaves nothing
	// in flight. The glue sends EventCancel when request.signal aborts
	// (enable_request_signal), but this workerd does not abort it when an
	// HTTP/1.1 client disconnects (checked with a log in the listener),
	// so the engine ends the question at its transaction timeout, as it
	// would a whole request's; with the abort the engine would count it
	// cancelled, which the wazero host's TestWazeroClientCancelNotCharged
	// checks through the same EventCancel.
	t.Run("client goes away", func(t *testing.T) {
		before := status(t, base)
		ctx, cancel := context.WithCancel(context.Background())
		wire := packQuery(t, "silent.cancel.test", dns.TypeA)
		req, _ := http.NewRequestWithContext(ctx, "GET", base+"/dns-query?dns="+base64.RawURLEncoding.EncodeToString(wire), nil)
		go func() {
			// Cancel once the question is under way upstream; the bound
			// only ends a test that is failing anyway (as the wazero
			// host's cancel test waits).
			deadline := time.Now().Add(60 * time.Second)
			for len(cancelled.Queries()) == 0 {
				if time.Now().After(deadline) {
					t.Errorf("the abandoned question never reached the server")
					break
				}
				time.Sleep(time.Millisecond)
			}
			cancel()
		}()
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			t.Fatalf("the abandoned request got HTTP %d; want the client's cancellation", resp.StatusCode)
		}
		cancelledAt := time.Now()
		m, _ := ask(t, "GET", base, "next.cancel.test")
		wantA(t, m, "192.0.2.6")
		if took := time.Since(cancelledAt); took >= time.Second {
			t.Fatalf("the next question was answered %v after the cancel; want at once", took)
		}
		var st abi.Status
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			st = status(t, base)
			q, b := st.Queries, before.Queries
			if answered(q) == answered(b)+2 && st.InFlight == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("questions the module answered %+v -> %+v, in flight %d: want both requests answered as questions and nothing left in flight", b, q, st.InFlight)
			}
		}
		b, c := before.Counters, st.Counters
		t.Logf("the abandoned question: cancelled %d, timeouts %d (request.signal aborted: %v)", c.Cancelled-b.Cancelled,
			c.Attempts["timeout"]-b.Attempts["timeout"], c.Cancelled > b.Cancelled)
	})
}

// answered is how many questions (EventQuery) the module answered: at
// once, on a worker, or finished in a poll (joined ones follow another).
func answered(q abi.QueryCounts) uint64 { return q.AtOnce + q.Waited + q.Finished }

// status reads the module's status through the glue (statusPath).
func status(t *testing.T, base string) abi.Status {
	t.Helper()
	r := get(t, base+statusPath, nil)
	var st abi.Status
	if err := json.Unmarshal(r.body, &st); r.status != http.StatusOK || err != nil {
		t.Fatalf("status: HTTP %d %v: %s", r.status, err, r.body)
	}
	return st
}

func packQuery(t *testing.T, name string, qtype uint16) []byte {
	t.Helper()
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), qtype)
	q.Id = 0
	wire, err := q.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return wire
}

func rcodeOf(t *testing.T, body []byte) int {
	t.Helper()
	m := new(dns.Msg)
	if err := m.Unpack(body); err != nil {
		t.Fatalf("not a DNS message: %v", err)
	}
	return m.Rcode
}

type answer struct {
	status int
	header http.Header
	body   []byte
}

func do(t *testing.T, req *http.Request) answer {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{resp.StatusCode, resp.Header, body}
}

func get(t *testing.T, url string, h http.Header) answer {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	maps.Copy(req.Header, h)
	return do(t, req)
}

// testTraceparent is the caller's trace both paths must carry on.
const testTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// exchange sends wire with GET or POST, as a plain request, or (odd) as
// one the glue hands whole to the module: a GET with another parameter, a
// POST whose Content-Type has a parameter.
func exchange(t *testing.T, method, base string, wire []byte, odd bool) answer {
	t.Helper()
	var req *http.Request
	if method == "GET" {
		url := base + "/dns-query?dns=" + base64.RawURLEncoding.EncodeToString(wire)
		if odd {
			url += "&via=module"
		}
		req, _ = http.NewRequest("GET", url, nil)
	} else {
		req, _ = http.NewRequest("POST", base+"/dns-query", bytes.NewReader(wire))
		ct := "application/dns-message"
		if odd {
			ct += "; via=module"
		}
		req.Header.Set("Content-Type", ct)
	}
	req.Header.Set("Accept", "application/dns-message")
	req.Header.Set("Traceparent", testTraceparent)
	return do(t, req)
}

var upstreamDur = regexp.MustCompile(`upstream;dur=[0-9.]+`)

// sameResponse fails unless a (the glue's) and b (the module's) are the
// same response from upstream (responseDiff).
func sameResponse(t *testing.T, what string, a, b answer) {
	t.Helper()
	if err := responseDiff("upstream", a, b); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// responseDiff says how a (the glue's) and b (the module's) differ, or nil
// when they are the same response from source (Server-Timing's): status,
// header names, every value but those of this moment (Date, Server-Timing's
// time, the span of traceresponse), body.
func responseDiff(source string, a, b answer) error {
	if a.status != b.status || !bytes.Equal(a.body, b.body) {
		return fmt.Errorf("glue HTTP %d %x, module HTTP %d %x", a.status, a.body, b.status, b.body)
	}
	if !slices.Equal(slices.Sorted(maps.Keys(a.header)), slices.Sorted(maps.Keys(b.header))) {
		return fmt.Errorf("glue headers %v, module headers %v", a.header, b.header)
	}
	for k, v := range a.header {
		w := b.header[k]
		switch k {
		case "Date":
			continue
		case "Server-Timing":
			v, w = []string{upstreamDur.ReplaceAllString(v[0], "")}, []string{upstreamDur.ReplaceAllString(w[0], "")}
			if !strings.HasPrefix(a.header.Get(k), "source;desc="+source+", attempts;desc=") {
				return fmt.Errorf("Server-Timing %q; want source %s", a.header.Get(k), source)
			}
		case "Traceresponse":
			// The caller's trace and flags, a span of the module's own.
			trace := regexp.MustCompile(`^00-` + testTraceparent[3:35] + `-[0-9a-f]{16}-01$`)
			if len(v) != 1 || len(w) != 1 || !trace.MatchString(v[0]) || !trace.MatchString(w[0]) || v[0][36:52] == testTraceparent[36:52] {
				return fmt.Errorf("traceresponse %q (glue), %q (module); want the caller's trace with a new span", v, w)
			}
			continue
		}
		if !slices.Equal(v, w) {
			return fmt.Errorf("%s is %q from the glue, %q from the module", k, v, w)
		}
	}
	return nil
}

// TestWorkerdCacheHits runs the glue with the cache on: a plain question
// the module has in memory is answered at once (dohfwd_ask, no poll),
// with the response the module's own handler writes for it, counted at
// once, asking upstream nothing; and so while another question waits
// upstream (a dropping first server holds it for 2 s).
func TestWorkerdCacheHits(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.1"))
	drop := upstreamtest.Start(t, upstreamtest.Drop())
	next := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.2"))
	base := startWorkerd(t, fmt.Sprintf(`scopes:
  - name: hit
    domains: [hit.test]
    servers: [%q]
  - name: drop
    domains: [drop.test]
    servers: [%q, %q]
fallback_servers: []
cache:
  max_entries: 1000
log:
  level: warn
`, up, drop, next))
	wire := packQuery(t, "www.hit.test", dns.TypeA)
	if first := exchange(t, "GET", base, wire, false); first.status != http.StatusOK || !strings.HasPrefix(first.header.Get("Server-Timing"), "source;desc=upstream") {
		t.Fatalf("first question: HTTP %d %v", first.status, first.header)
	}

	hits := func(what string) uint64 {
		t.Helper()
		var n uint64
		for _, method := range []string{"GET", "POST"} {
			// A pair read across a second's turn differs in its TTLs:
			// one pair in two tries is the same.
			var err error
			for range 2 {
				f := exchange(t, method, base, wire, false)
				m := exchange(t, method, base, wire, true)
				n++
				if err = responseDiff("cache", f, m); err == nil {
					break
				}
			}
			if err != nil {
				t.Fatalf("%s, %s hit: %v", what, method, err)
			}
		}
		return n
	}
	before := status(t, base)
	n := hits("quiet")
	after := status(t, base)
	if a, w := after.Queries.AtOnce-before.Queries.AtOnce, after.Queries.Waited-before.Queries.Waited; a != n || w != 0 {
		t.Fatalf("%d hits counted %d at once and %d waited; want all at once", n, a, w)
	}
	if q := len(up.Queries()); q != 1 {
		t.Fatalf("upstream read %d queries, want the first question's only", q)
	}

	// A question held upstream: hits go by it.
	held := make(chan error, 1)
	go func() {
		m, err := try("GET", base, "www.drop.test")
		if err == nil {
			err = checkA(m, "192.0.2.2")
		}
		held <- err
	}()
	for st := status(t, base); st.InFlight == 0; st = status(t, base) {
		select {
		case err := <-held:
			t.Fatalf("the held question ended before it was seen in flight: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	before = status(t, base)
	n = hits("beside a question in flight")
	after = status(t, base)
	if after.InFlight == 0 {
		t.Fatalf("the held question ended before the hits were in; the test shows nothing")
	}
	if a, w := after.Queries.AtOnce-before.Queries.AtOnce, after.Queries.Waited-before.Queries.Waited; a != n || w != 0 {
		t.Fatalf("%d hits beside a question in flight counted %d at once and %d waited; want all at once", n, a, w)
	}
	if err := <-held; err != nil {
		t.Fatal(err)
	}
}
