package host

import (
	"fmt"
	"io"
	"sync/atomic"

	"github.com/rs/zerolog"

	"github.com/dohfwd/dohfwd/doh/config"
	"github.com/dohfwd/dohfwd/edge/abi"
	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/telemetry"
)

// Native hits. A cache hit costs the module's engine about 7 µs as
// WebAssembly, ten times its native cost, and one instance runs one call
// at a time: hits through the module cap the host well below dohfwd
// serve's rate. So the host answers the hits that are pure reads of the
// engine's state natively, on the goroutine that read the request, from
// a mirror of the engine's hot entries (engine.HotEntries) that the
// module publishes (abi.InitPublishHotEntries): the engine's own code, compiled
// natively, with the same parse, route, key, reply, counters and
// question event. Every other question goes to the module as before.

// hotEntries is a pool's native hits: the engine's mirror and its
// question events' observer, whose log level follows reloads.
type hotEntries struct {
	m        *engine.HotEntries
	observer swappedObserver
	stderr   io.Writer
	// log is the host's logger (stderr, at the configuration's level),
	// which warns of the first rejected record.
	log      atomic.Pointer[zerolog.Logger]
	rejected atomic.Uint64 // records that did not read (a host/module mismatch)
}

// newHotEntries returns the mirror for an engine configured with encoded
// (config.Encode); its question events go to stderr as the module's do.
func newHotEntries(encoded []byte, stderr io.Writer) (*hotEntries, error) {
	cfg, err := config.Decode(encoded)
	if err != nil {
		return nil, fmt.Errorf("edge: native hits: %w", err)
	}
	h := &hotEntries{stderr: stderr}
	if err := h.setObserver(cfg); err != nil {
		return nil, err
	}
	if h.m, err = engine.NewHotEntries(cfg.EngineConfig(), &h.observer); err != nil {
		return nil, fmt.Errorf("edge: native hits: %w", err)
	}
	return h, nil
}

// setObserver logs the mirror's question events as the module's engine
// logs its own (module/handler.go): JSON, at cfg's level.
func (h *hotEntries) setObserver(cfg *config.Config) error {
	log, err := telemetry.NewLogger(h.stderr, "json", cfg.Log.Level)
	if err != nil {
		return fmt.Errorf("edge: native hits: log: %w", err)
	}
	h.observer.o.Store(telemetry.NewObserver(log, nil))
	h.log.Store(&log)
	return nil
}

// take reads a poll result's PublishedID answer into the mirror.
func (h *hotEntries) take(field []byte) {
	err := abi.HitRecords(field, func(rec []byte) {
		if err := h.m.Publish(rec); err != nil {
			h.reject(err)
		}
	})
	if err != nil {
		h.reject(err)
	}
}

// reject counts a record that did not read and warns of the first: a
// host and module that disagree on the record (versions) silently leave
// every hit to the module otherwise.
func (h *hotEntries) reject(err error) {
	if h.rejected.Add(1) == 1 {
		h.log.Load().Warn().Err(err).
			Msg("edge: native hits: a hit record from the module did not read (host and module of different versions?); its hits stay with the module")
	}
}

// suspend stops native answers before a reload reaches the module.
func (h *hotEntries) suspend() { h.m.Suspend() }

// reconfigure empties the mirror under the configuration the module runs
// after a reload (encoded: the new one, or the old one when the module
// refused it); the module publishes its entries again.
func (h *hotEntries) reconfigure(encoded []byte) error {
	cfg, err := config.Decode(encoded)
	if err != nil {
		return fmt.Errorf("edge: native hits: %w", err)
	}
	if err := h.setObserver(cfg); err != nil {
		return err
	}
	return h.m.Reconfigure(cfg.EngineConfig())
}

// swappedObserver is an engine.Observer whose target a reload replaces
// (the log level).
type swappedObserver struct {
	o atomic.Pointer[telemetry.Observer]
}

func (s *swappedObserver) Attempt(ev engine.AttemptEvent)   { s.o.Load().Attempt(ev) }
func (s *swappedObserver) Question(ev engine.QuestionEvent) { s.o.Load().Question(ev) }

// answerHit answers query natively when the mirror holds its entry (see
// engine.HotEntries.AnswerNow).
func (p *Pool) answerHit(query, dst []byte, trace *engine.Trace) (engine.Response, bool) {
	if p.hits == nil {
		return engine.Response{}, false
	}
	return p.hits.m.AnswerNow(query, dst, trace, nil)
}

// hitCounters are the mirror's counters, added to the instances' in
// Status.
func (p *Pool) hitCounters() engine.Counters {
	if p.hits == nil {
		return engine.Counters{}
	}
	return p.hits.m.Counters()
}
