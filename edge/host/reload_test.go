package host

import (
	"context"
	"net/netip"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/tetratelabs/wazero/api"

	"github.com/dohfwd/dohfwd/doh/assembly"
	"github.com/dohfwd/dohfwd/doh/config"
	"github.com/dohfwd/dohfwd/edge/abi"
	"github.com/dohfwd/dohfwd/edge/moduletest"
	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
)

// These tests are about SIGHUP reaching the module whole
// (abi.ExportReload): its engine's configuration, its log level and its
// limits, as dohfwd serve applies a reload.

// reloadEdge is a pool reloaded as dohfwd-edge reloads it: package
// assembly's Serve (package server) over the pool, with no listener (the
// questions go straight to the pool), SIGHUP on a channel, and a Load that
// returns the test's next configuration.
type reloadEdge struct {
	pool *Pool
	log  *syncBuffer // the module's
	sigs chan os.Signal
	next chan *config.Config // what Load returns
	done chan error          // each reload's outcome, as the pool returned it
}

// watched is the pool as the server's backend, telling the test each
// reload's outcome.
type watched struct {
	*Pool
	done chan error
}

func (w watched) Reload(cfg *config.Config) error {
	err := w.Pool.Reload(cfg)
	w.done <- err
	return err
}

// noListeners leaves one listener, plaintext DoH on a free port, which the
// server needs; the tests put their questions straight to the pool.
const noListeners = `listen: {https: "", http: "127.0.0.1:0", dot: "", dns: "", admin: ""}` + "\n"

func startReloadEdge(t *testing.T, yaml []byte) *reloadEdge {
	t.Helper()
	ctx := context.Background()
	wasm, _ := moduletest.Build(t)
	e := &reloadEdge{log: new(syncBuffer), sigs: make(chan os.Signal), next: make(chan *config.Config), done: make(chan error, 1)}
	rt, err := NewRuntime(ctx, wasm, Options{CacheDir: moduletest.CacheDir(t), Stderr: e.log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close(ctx) })
	yaml = withConfig(yaml, noListeners)
	if e.pool, err = NewPool(ctx, rt, yaml, 1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.pool.Close(ctx) })
	d, err := assembly.New(parseConfig(t, yaml), assembly.Options{LogTo: new(syncBuffer), Resolver: e.pool})
	if err != nil {
		t.Fatal(err)
	}
	serveCtx, cancel := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() {
		served <- d.Serve(serveCtx, assembly.Serving{
			Backend: watched{e.pool, e.done}, Handler: d.Handler, Version: "test", Signals: e.sigs,
			Load: func() (*config.Config, error) { return <-e.next, nil },
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return e
}

func parseConfig(t *testing.T, yaml []byte) *config.Config {
	t.Helper()
	cfg, err := config.Parse("edge.yaml", withConfig(yaml, noListeners))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// reload sends SIGHUP with cfg the configuration read again, and returns
// what the pool said.
func (e *reloadEdge) reload(t *testing.T, cfg *config.Config) error {
	t.Helper()
	e.sigs <- syscall.SIGHUP
	e.next <- cfg
	select {
	case err := <-e.done:
		return err
	case <-time.After(time.Minute):
		t.Fatal("the reload never reached the pool")
		return nil
	}
}

// askAs puts a question for name to the pool as the front end does for
// client, and returns the engine's answer.
func (e *reloadEdge) askAs(ctx context.Context, client, name string) (*dns.Msg, engine.Response) {
	wire, _ := query(name, dns.TypeA).Pack()
	r := e.pool.Resolve(engine.WithClient(ctx, netip.MustParseAddr(client)), wire, nil)
	m := new(dns.Msg)
	if m.Unpack(r.Wire) != nil {
		return nil, r
	}
	return m, r
}

// attempts counts the module's attempt events for name (a FQDN).
func (e *reloadEdge) attempts(name string) int {
	n := 0
	for _, line := range strings.Split(e.log.String(), "\n") {
		if strings.Contains(line, `"message":"attempt"`) && strings.Contains(line, `"`+name+`"`) {
			n++
		}
	}
	return n
}

// settled waits for the module's calls under way to end (a status is read
// between two polls), so every event of a question answered is written.
func (e *reloadEdge) settled(t *testing.T) {
	t.Helper()
	if _, err := e.pool.snapshots(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A SIGHUP that raises log.level makes the module write the attempt events
// it did not write before; one that lowers it again stops them. (The
// module's logger is its own: before dohfwd_reload only the host's level
// changed.)
func TestWazeroReloadSetsTheModulesLogLevel(t *testing.T) {
	t.Parallel()
	up := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.20"))
	base := edgeConfig(up) // log.level error, no cache
	e := startReloadEdge(t, base)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ask := func(name string) {
		t.Helper()
		if m, r := e.askAs(ctx, "192.0.2.100", name); m == nil || m.Rcode != dns.RcodeSuccess {
			t.Fatalf("%s: %v (%v)", name, m, r.Result)
		}
		e.settled(t)
	}

	ask("quiet.example.org")
	if n := e.attempts("quiet.example.org."); n != 0 {
		t.Fatalf("at level error the module wrote %d attempt events:\n%s", n, e.log.String())
	}
	if err := e.reload(t, parseConfig(t, withConfig(base, "log: {level: info}\n"))); err != nil {
		t.Fatal(err)
	}
	ask("loud.example.org")
	if n := e.attempts("loud.example.org."); n != 1 {
		t.Fatalf("after a reload to info the module wrote %d attempt events for the question, want 1:\n%s", n, e.log.String())
	}
	if err := e.reload(t, parseConfig(t, base)); err != nil {
		t.Fatal(err)
	}
	ask("quiet-again.example.org")
	if n := e.attempts("quiet-again.example.org."); n != 0 {
		t.Fatalf("after a reload back to error the module wrote %d attempt events:\n%s", n, e.log.String())
	}
}

// shareUpstream answers at once, but holds names under slow. for 700 ms:
// a question held upstream holds its client's share of transactions.
func shareUpstream(t *testing.T) *upstreamtest.Server {
	return upstreamtest.Start(t, func(q upstreamtest.Query) upstreamtest.Action {
		if q.Msg != nil && len(q.Msg.Question) == 1 && strings.HasPrefix(strings.ToLower(q.Msg.Question[0].Name), "slow") {
			return upstreamtest.Delay(700*time.Millisecond, upstreamtest.Answer("@ 60 IN A 192.0.2.21"))(q)
		}
		return upstreamtest.Answer("@ 60 IN A 192.0.2.21")(q)
	})
}

// whileHeld asks slow (held upstream) for one client and, once the
// upstream holds it, other for a second client of the same /24; it
// returns the second answer's rcode.
func (e *reloadEdge) whileHeld(t *testing.T, up *upstreamtest.Server, slow, other string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	held := make(chan *dns.Msg, 1)
	go func() {
		m, _ := e.askAs(ctx, "203.0.113.9", slow)
		held <- m
	}()
	for deadline := time.Now().Add(10 * time.Second); !askedFor(up, dns.Fqdn(slow)); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s never reached the upstream", slow)
		}
	}
	m, r := e.askAs(ctx, "203.0.113.10", other)
	if m == nil {
		t.Fatalf("%s: no reply (%v)", other, r.Result)
	}
	if h := <-held; h == nil || h.Rcode != dns.RcodeSuccess {
		t.Fatalf("the held question %s: %v", slow, h)
	}
	return m.Rcode
}

// limits.client_in_flight is enforced by the module's engine (it gets the
// client with each question). A SIGHUP that changes it
// changes the module's share: with 1, a client's second question while its
// first is held upstream is refused; reloaded to 2, it is answered;
// reloaded to 1 again, refused again.
func TestWazeroReloadChangesTheModulesClientShare(t *testing.T) {
	t.Parallel()
	up := shareUpstream(t)
	base := edgeConfig(up)
	e := startReloadEdge(t, withConfig(base, "limits: {client_in_flight: 1}\n"))

	if rc := e.whileHeld(t, up, "slow1.example.org", "other1.example.org"); rc != dns.RcodeRefused {
		t.Fatalf("client_in_flight 1: the second question got %s, want REFUSED", dns.RcodeToString[rc])
	}
	if err := e.reload(t, parseConfig(t, withConfig(base, "limits: {client_in_flight: 2}\n"))); err != nil {
		t.Fatal(err)
	}
	if rc := e.whileHeld(t, up, "slow2.example.org", "other2.example.org"); rc != dns.RcodeSuccess {
		t.Fatalf("reloaded to client_in_flight 2: the second question got %s, want an answer", dns.RcodeToString[rc])
	}
	if err := e.reload(t, parseConfig(t, withConfig(base, "limits: {client_in_flight: 1}\n"))); err != nil {
		t.Fatal(err)
	}
	if rc := e.whileHeld(t, up, "slow3.example.org", "other3.example.org"); rc != dns.RcodeRefused {
		t.Fatalf("reloaded back to client_in_flight 1: the second question got %s, want REFUSED", dns.RcodeToString[rc])
	}
}

// A reload the module refuses changes nothing in it: neither its log
// level nor its client share nor its servers; and an instance that
// replaces a failed one (after a trap) starts from the last reload the
// pool took, not from the configuration the host started with.
func TestWazeroRefusedReloadKeepsTheModulesConfiguration(t *testing.T) {
	t.Parallel()
	up := shareUpstream(t)
	other := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.22"))
	base := withConfig(edgeConfig(up), "limits: {client_in_flight: 1}\n")
	e := startReloadEdge(t, base)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Every part changes, and the scope takes the fallback scope's name,
	// which the engine refuses. The host's checks refuse it at load, so it
	// is set after them: the module checks what it is handed (config.Decode,
	// the engine's own rules) before anything changes, as the engine does
	// natively (assembly's TestReloadIsWholeOrNothing has the engine's
	// refusal itself).
	refused := parseConfig(t, withConfig(edgeConfig(other), "log: {level: info}\n"))
	refused.Scopes[0].Name = engine.FallbackScope
	if err := e.reload(t, refused); err == nil || !strings.Contains(err.Error(), engine.FallbackScope) {
		t.Fatalf("reload with a scope named %q: %v, want it refused", engine.FallbackScope, err)
	}
	m, _ := e.askAs(ctx, "192.0.2.100", "kept.example.org")
	if m == nil || len(m.Answer) != 1 || m.Answer[0].(*dns.A).A.String() != "192.0.2.21" {
		t.Fatalf("after the refused reload: %v, want the first server's answer", m)
	}
	e.settled(t)
	if n := e.attempts("kept.example.org."); n != 0 {
		t.Fatalf("after the refused reload to info the module wrote %d attempt events", n)
	}
	if rc := e.whileHeld(t, up, "slow1.example.org", "other1.example.org"); rc != dns.RcodeRefused {
		t.Fatalf("after the refused reload the second question got %s, want REFUSED (client_in_flight 1 kept)", dns.RcodeToString[rc])
	}

	// A reload taken, then the instance replaced: the new one has it.
	if err := e.reload(t, parseConfig(t, withConfig(base, "log: {level: info}\nlimits: {client_in_flight: 2}\n"))); err != nil {
		t.Fatal(err)
	}
	old := e.pool.instances()[0]
	e.pool.replace(ctx, old)
	if all := e.pool.instances(); len(all) != 1 || all[0] == old {
		t.Fatalf("instances after the replacement: %v (old %p)", all, old)
	}
	if rc := e.whileHeld(t, up, "slow2.example.org", "other2.example.org"); rc != dns.RcodeSuccess {
		t.Fatalf("the replacement: the second question got %s, want an answer (client_in_flight 2 reloaded)", dns.RcodeToString[rc])
	}
	e.settled(t)
	if n := e.attempts("other2.example.org."); n != 1 {
		t.Fatalf("the replacement wrote %d attempt events for a question, want 1 (log.level info reloaded)", n)
	}
}

// The module exports what package abi names, each with the signature its
// comment documents, and no other dohfwd_ function: a host and a module
// of different ABIs (dohfwd_reconfigure, which dohfwd_reload replaced)
// fail at instantiation.
func TestModuleExportsTheABI(t *testing.T) {
	const i32, i64 = api.ValueTypeI32, api.ValueTypeI64
	want := map[string][2][]api.ValueType{ // params, results
		abi.ExportBuffer: {{i32}, {i32}},
		abi.ExportInit:   {{i32, i32}, {i32}},
		abi.ExportPoll:   {{i64, i32}, {i32}},
		abi.ExportStatus: {nil, {i32}},
		abi.ExportReload: {{i32}, {i32}},
		abi.ExportAsk:    {{i32}, {i32}},
	}
	if len(want) != len(abi.Exports) {
		t.Fatalf("abi.Exports %v; this test knows %d exports", abi.Exports, len(want))
	}
	got := testRuntime(t).compiled.ExportedFunctions()
	for _, name := range abi.Exports {
		w, ok := want[name]
		if !ok {
			t.Errorf("abi.Exports names %s, whose signature this test does not know", name)
			continue
		}
		f := got[name]
		if f == nil {
			t.Errorf("the module does not export %s", name)
			continue
		}
		if !slices.Equal(f.ParamTypes(), w[0]) || !slices.Equal(f.ResultTypes(), w[1]) {
			t.Errorf("%s: %v -> %v, want %v -> %v", name, f.ParamTypes(), f.ResultTypes(), w[0], w[1])
		}
	}
	for name := range got {
		if strings.HasPrefix(name, "dohfwd_") && !slices.Contains(abi.Exports, name) {
			t.Errorf("the module exports %s, which abi.Exports does not name", name)
		}
	}
}
