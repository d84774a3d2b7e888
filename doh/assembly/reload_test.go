package assembly

import (
	"io"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/dohfwd/dohfwd/doh/config"
	"github.com/dohfwd/dohfwd/doh/server"
	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
)

// Dohfwd.Reload (what the module runs for dohfwd_reload) applies a reload
// whole or not at all: a configuration the engine refuses changes neither
// the engine's servers nor the limits nor the log level; one it takes
// changes all three.
func TestReloadIsWholeOrNothing(t *testing.T) {
	level := zerolog.GlobalLevel() // process-wide: put back for the other tests
	t.Cleanup(func() { zerolog.SetGlobalLevel(level) })
	a := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.1"))
	b := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.2"))
	cfg := testConfig(t, a)
	cfg.Limits.ClientInFlight = 1
	d, err := New(cfg, Options{LogTo: io.Discard, Network: engine.NativeNetwork{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)

	next := testConfig(t, b)
	next.Limits.ClientInFlight = 5
	next.Log.Level = "debug"
	next.Scopes[0].Name = engine.FallbackScope // the engine's name: refused
	if err := d.Reload(next); err == nil || !strings.Contains(err.Error(), "name is taken") {
		t.Fatalf("reload with a scope named %q: %v, want the engine's refusal", engine.FallbackScope, err)
	}
	ask(t, d.Handler, "kept.example.org")
	wantState := func(after string, aQueries, bQueries, inFlight int, level zerolog.Level) {
		t.Helper()
		if len(a.Queries()) != aQueries || len(b.Queries()) != bQueries {
			t.Fatalf("after %s: first server %d queries, second %d; want %d and %d", after, len(a.Queries()), len(b.Queries()), aQueries, bQueries)
		}
		if n := d.Limits.Config().ClientInFlight; n != inFlight {
			t.Errorf("after %s client_in_flight is %d, want %d", after, n, inFlight)
		}
		if l := zerolog.GlobalLevel(); l != level {
			t.Errorf("after %s the log level is %v, want %v", after, l, level)
		}
	}
	wantState("the refused reload", 1, 0, 1, zerolog.ErrorLevel)

	next.Scopes[0].Name = "test"
	if err := d.Reload(next); err != nil {
		t.Fatal(err)
	}
	ask(t, d.Handler, "moved.example.org")
	wantState("the reload", 1, 1, 5, zerolog.DebugLevel)
}

// wholeBackend is a backend that takes reloads whole (as the edge host's
// pool does), recording them.
type wholeBackend struct {
	*engine.Engine
	got          *config.Config
	reconfigured bool
	refuse       error
}

func (w *wholeBackend) Reload(cfg *config.Config) error {
	if w.refuse != nil {
		return w.refuse
	}
	w.got = cfg
	return nil
}

func (w *wholeBackend) Reconfigure(engine.Config) error {
	w.reconfigured = true
	return nil
}

// The server hands a reload to the assembly's wrapper of the backend
// (reloading): a backend that takes reloads whole gets the whole
// configuration, the engine its part.
func TestReloadingPassesAWholeReloadOn(t *testing.T) {
	a := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.1"))
	cfg := testConfig(t, a)
	d, err := New(cfg, Options{LogTo: io.Discard, Network: engine.NativeNetwork{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	var backend server.Backend = reloading{&wholeBackend{Engine: d.Engine}, d}
	next := testConfig(t, a)
	if err := backend.Reload(next); err != nil {
		t.Fatal(err)
	}
	w := backend.(reloading).Backend.(*wholeBackend)
	if w.got != next || w.reconfigured {
		t.Fatalf("a whole backend got %p (want %p), Reconfigure called %v", w.got, next, w.reconfigured)
	}

	engineOnly := reloading{d.Engine, d}
	bad := testConfig(t, a)
	bad.Scopes[0].Name = engine.FallbackScope
	if err := engineOnly.Reload(bad); err == nil {
		t.Fatal("the engine's refusal did not reach the server")
	}
}
