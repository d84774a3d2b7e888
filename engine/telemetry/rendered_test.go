package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/miekg/dns"
	"github.com/rs/zerolog"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/memnet"
	"github.com/dohfwd/dohfwd/engine/telemetry"
)

// fixedEnd is the time of the events whose bytes are pinned below.
var fixedEnd = time.Date(2026, 12, 1, 12, 0, 0, 123456000, time.UTC)

// TestEventBytesForFixedInput pins the bytes of an attempt and a question
// event: the fields rendered once per combination come first (level and
// message included), then those of the question, then the time the engine
// read.
func TestEventBytesForFixedInput(t *testing.T) {
	for _, batched := range []bool{false, true} {
		t.Run(map[bool]string{false: "logger", true: "batched"}[batched], func(t *testing.T) {
			testEventBytesForFixedInput(t, batched)
		})
	}
}

func testEventBytesForFixedInput(t *testing.T, batched bool) {
	var buf bytes.Buffer
	o, bw := observerInto(t, &buf, batched)
	tr := &engine.Trace{ID: [16]byte{0xab, 1}, Span: [8]byte{0xcd}}
	for range 2 { // rendered, then from the kept rendering
		o.Attempt(engine.AttemptEvent{Question: 42, QName: "www.example.org.", QType: dns.TypeA, Scope: "corp",
			Attempt: 1, Server: netip.MustParseAddrPort("192.0.2.53:53"), Transport: engine.UDP,
			Outcome: engine.OutcomeAnswer, Rcode: dns.RcodeSuccess, RTT: 1520 * time.Microsecond, End: fixedEnd, Trace: tr})
		o.Question(engine.QuestionEvent{Question: 42, QName: "www.example.org.", QType: dns.TypeA, Scope: "corp",
			Result: engine.ResultAnswer, Attempts: 1, Duration: 1600 * time.Microsecond, End: fixedEnd, Trace: tr})
	}
	attempt := `{"level":"info","message":"attempt","scope":"corp","server":"192.0.2.53:53","transport":"udp",` +
		`"qtype":"A","attempt":1,"outcome":"answer","rcode":"NOERROR","demoted":false,"question":42,` +
		`"qname":"www.example.org.","rtt_ms":1.52,"trace_id":"ab010000000000000000000000000000",` +
		`"span_id":"cd00000000000000","time":"2026-12-01T12:00:00.123456Z"}` + "\n"
	question := `{"level":"info","message":"question","scope":"corp","qtype":"A","result":"answer","attempts":1,` +
		`"cache_hit":false,"question":42,"qname":"www.example.org.","duration_ms":1.6,` +
		`"trace_id":"ab010000000000000000000000000000","span_id":"cd00000000000000",` +
		`"time":"2026-12-01T12:00:00.123456Z"}` + "\n"
	if bw != nil {
		if buf.Len() != 0 {
			t.Errorf("events written before the batch: %s", buf.Bytes())
		}
		bw.Close()
	}
	if got, want := buf.String(), strings.Repeat(attempt+question, 2); got != want {
		t.Errorf("events\n%s\nwant\n%s", got, want)
	}
}

// zerologAttempt and zerologQuestion write the events field by field
// with zerolog's Event API, as the observer did before it rendered
// fields once: the reference for names and values.
func zerologAttempt(log zerolog.Logger, ev engine.AttemptEvent) {
	var server [64]byte
	e := log.Info().Uint64("question", ev.Question).Str("qname", ev.QName)
	e = zerologType(e, ev.QType).Str("scope", ev.Scope).Int("attempt", ev.Attempt).
		Bytes("server", ev.Server.AppendTo(server[:0])).Str("transport", ev.Transport.String()).
		Str("outcome", ev.Outcome.String())
	switch s, ok := dns.RcodeToString[ev.Rcode]; {
	case ev.Rcode < 0:
		e = e.Str("rcode", "")
	case ok:
		e = e.Str("rcode", s)
	default:
		e = e.Int("rcode", ev.Rcode)
	}
	e = e.Float64("rtt_ms", float64(ev.RTT.Microseconds())/1000).Bool("demoted", ev.Demoted)
	zerologTrace(e, ev.Trace).Time("time", ev.End).Msg("attempt")
}

func zerologQuestion(log zerolog.Logger, ev engine.QuestionEvent) {
	e := log.Info().Uint64("question", ev.Question).Str("qname", ev.QName)
	e = zerologType(e, ev.QType).Str("scope", ev.Scope).Str("result", ev.Result.String())
	if ev.Reason != engine.ReasonNone {
		e = e.Str("reason", ev.Reason.String())
	}
	e = e.Int("attempts", ev.Attempts).Bool("cache_hit", ev.CacheHit).
		Float64("duration_ms", float64(ev.Duration.Microseconds())/1000)
	e = zerologTrace(e, ev.Trace)
	if ev.Joined != nil {
		e = e.Hex("joined_trace_id", ev.Joined.ID[:])
	}
	e.Time("time", ev.End).Msg("question")
}

func zerologType(e *zerolog.Event, t uint16) *zerolog.Event {
	if s, ok := dns.TypeToString[t]; ok {
		return e.Str("qtype", s)
	}
	return e.Uint16("qtype", t)
}

func zerologTrace(e *zerolog.Event, t *engine.Trace) *zerolog.Event {
	if t == nil {
		return e
	}
	e = e.Hex("trace_id", t.ID[:]).Hex("span_id", t.Span[:])
	if t.HasParent {
		e = e.Hex("parent_id", t.Parent[:])
	}
	return e
}

// TestEventsAsZerologWritesThem: for many events, more distinct
// combinations than the observer keeps rendered (so slots are taken over
// and rendered again), each event has exactly the fields and values that
// zerolog's Event API writes for it.
func TestEventsAsZerologWritesThem(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	scopes := []string{"corp", "fallback", "lab \"quoted\"", "ünïcode"}
	servers := []netip.AddrPort{netip.MustParseAddrPort("192.0.2.1:53"), netip.MustParseAddrPort("[2001:db8::53]:5353"),
		netip.MustParseAddrPort("[fe80::1%eth0]:53"), netip.MustParseAddrPort("127.0.0.1:1053")}
	qtypes := []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeHTTPS, dns.TypeMX, 0xff00}
	rcodes := []int{-1, dns.RcodeSuccess, dns.RcodeServerFailure, dns.RcodeRefused, 4000}
	rtts := []time.Duration{0, 999 * time.Nanosecond, time.Microsecond, 52 * time.Microsecond, 1500 * time.Microsecond,
		2 * time.Second, 20 * time.Second, -3 * time.Millisecond}
	zones := []*time.Location{time.UTC, time.FixedZone("", 5*3600+30*60)}
	trace := func() *engine.Trace {
		if rng.IntN(3) == 0 {
			return nil
		}
		tr := &engine.Trace{HasParent: rng.IntN(2) == 0}
		tr.ID[0], tr.Span[1], tr.Parent[2] = byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32())
		return tr
	}
	var got, want bytes.Buffer
	o := telemetry.NewObserver(zerolog.New(&got), nil)
	ref := zerolog.New(&want)
	for i := range 3000 {
		end := fixedEnd.Add(time.Duration(rng.Int64N(int64(time.Hour)))).In(zones[rng.IntN(len(zones))])
		qname := fmt.Sprintf("n%d.example.", i)
		a := engine.AttemptEvent{Question: uint64(i), QName: qname, QType: qtypes[rng.IntN(len(qtypes))],
			Scope: scopes[rng.IntN(len(scopes))], Attempt: 1 + rng.IntN(3), Server: servers[rng.IntN(len(servers))],
			Transport: engine.Transport(rng.IntN(2)), Outcome: engine.Outcome(rng.IntN(10)),
			Rcode: rcodes[rng.IntN(len(rcodes))], RTT: rtts[rng.IntN(len(rtts))], End: end,
			Demoted: rng.IntN(2) == 0, Trace: trace()}
		q := engine.QuestionEvent{Question: uint64(i), QName: qname, QType: a.QType, Scope: a.Scope,
			Result: engine.Result(rng.IntN(4)), Reason: engine.Reason(rng.IntN(3)), Attempts: rng.IntN(4),
			CacheHit: rng.IntN(2) == 0, Duration: rtts[rng.IntN(len(rtts))], End: end, Trace: trace()}
		if rng.IntN(4) == 0 {
			q.Joined = trace()
		}
		got.Reset()
		want.Reset()
		o.Attempt(a)
		zerologAttempt(ref, a)
		sameFields(t, got.Bytes(), want.Bytes())
		got.Reset()
		want.Reset()
		o.Question(q)
		zerologQuestion(ref, q)
		sameFields(t, got.Bytes(), want.Bytes())
		if t.Failed() {
			t.Fatalf("event %d", i)
		}
	}
}

func sameFields(t *testing.T, got, want []byte) {
	t.Helper()
	var g, w map[string]any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%v: %s", err, got)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatalf("%v: %s", err, want)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("event\n%s\nwant the fields of\n%s", got, want)
	}
}

// TestEventsCarryTheEngineTime: with the process logger (whose hook times
// every other event) an observer event has one "time", the one the engine
// read; without one (a zero End) the clock's.
func TestEventsCarryTheEngineTime(t *testing.T) {
	t.Run("logger", func(t *testing.T) { testEventsCarryTheEngineTime(t, false) })
	t.Run("batched", func(t *testing.T) { testEventsCarryTheEngineTime(t, true) })
}

func testEventsCarryTheEngineTime(t *testing.T, batched bool) {
	var buf bytes.Buffer
	o, bw := observerInto(t, &buf, batched)
	a := sampleAttempt
	a.End = fixedEnd
	o.Attempt(a)
	o.Question(engine.QuestionEvent{QName: "a.example.", End: fixedEnd})
	before := time.Now()
	o.Question(engine.QuestionEvent{QName: "a.example."})
	after := time.Now()
	if bw != nil {
		bw.Close()
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	for i, line := range lines {
		if n := strings.Count(line, `"time":`); n != 1 {
			t.Errorf("event %d has %d time fields: %s", i, n, line)
		}
		var ev struct{ Time time.Time }
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatal(err)
		}
		if i < 2 && !ev.Time.Equal(fixedEnd) || i == 2 && (ev.Time.Before(before) || ev.Time.After(after)) {
			t.Errorf("event %d at %v: %s", i, ev.Time, line)
		}
	}
}

// TestLoggerLevelFiltersEvents: the observer's events follow the level of
// the logger it was given, not only the process-wide one.
func TestLoggerLevelFiltersEvents(t *testing.T) {
	var buf bytes.Buffer
	o := telemetry.NewObserver(zerolog.New(&buf).Level(zerolog.WarnLevel), nil)
	o.Attempt(sampleAttempt)
	o.Question(engine.QuestionEvent{QName: "a.example."})
	telemetry.NewObserver(zerolog.Nop(), nil).Attempt(sampleAttempt)
	if buf.Len() != 0 {
		t.Fatalf("info events written by a warn logger: %s", buf.Bytes())
	}
}

// TestConsoleFormatShowsEvents: on a terminal the events, written at
// zerolog's NoLevel with their level rendered, still read as info.
func TestConsoleFormatShowsEvents(t *testing.T) {
	var buf bytes.Buffer
	log, err := telemetry.NewLogger(&buf, "console", "info")
	if err != nil {
		t.Fatal(err)
	}
	telemetry.NewObserver(log, nil).Attempt(sampleAttempt)
	if s := buf.String(); !strings.Contains(s, "INF") || !strings.Contains(s, "attempt") || !strings.Contains(s, "server=") {
		t.Fatalf("console line %q", s)
	}
}

// TestReloadedServerGetsItsOwnFields: the engine's attempts on a server
// that a reload brought in name that server (and its scope), not the one
// whose fields were rendered before the reload.
func TestReloadedServerGetsItsOwnFields(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := netip.MustParseAddrPort("127.0.0.1:53")
		b := netip.MustParseAddrPort("127.0.0.2:5353")
		nw := memnet.New()
		nw.Handle(a, memnet.Respond(memnet.Answer("@ 60 IN A 192.0.2.1")))
		nw.Handle(b, memnet.Respond(memnet.Answer("@ 60 IN A 192.0.2.2")))
		cfg := func(scope string, server netip.AddrPort) engine.Config {
			return engine.Config{Scopes: []engine.ScopeConfig{{Name: scope, DefaultRoute: true,
				Servers: []string{server.String()}}}}
		}
		var buf bytes.Buffer
		e, err := engine.New(cfg("main", a), engine.Options{Network: nw,
			Observer: telemetry.NewObserver(zerolog.New(&buf), nil)})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		ask := func(name string) {
			q := new(dns.Msg)
			q.SetQuestion(name, dns.TypeA)
			raw, err := q.Pack()
			if err != nil {
				t.Fatal(err)
			}
			if r := e.Resolve(context.Background(), raw, nil); r.Result != engine.ResultAnswer {
				t.Fatalf("%s: %v", name, r.Result)
			}
		}
		ask("before.example.")
		for _, c := range []engine.Config{cfg("main", b), cfg("other", b), cfg("main", a)} {
			if err := e.Reconfigure(c); err != nil {
				t.Fatal(err)
			}
			ask("after-" + c.Scopes[0].Name + ".example.")
		}
		var got []string
		for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			var ev struct{ Message, Scope, Server, Qname string }
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				t.Fatal(err)
			}
			if ev.Message == "attempt" {
				got = append(got, ev.Scope+" "+ev.Server)
			}
		}
		want := []string{"main 127.0.0.1:53", "main 127.0.0.2:5353", "other 127.0.0.2:5353", "main 127.0.0.1:53"}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("attempts on %q, want %q", got, want)
		}
	})
}

// TestBatchedObserverWritesAsObserver: the events an observer encodes
// straight into its BatchWriter's batch are byte for byte those the
// observer writes through zerolog, for events of every shape: names that
// need escaping, scopes that do, served and joined traces, times in other
// zones, and events after the writer is closed (which go through).
func TestBatchedObserverWritesAsObserver(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	scopes := []string{"corp", "lab \"quoted\"", "ünïcode", strings.Repeat("s", 300)}
	names := []string{"www.example.org.", "a.", ".", "tab\tname.", "quote\".", "ünï.", strings.Repeat("abcdefgh.", 28)}
	servers := []netip.AddrPort{netip.MustParseAddrPort("192.0.2.1:53"), netip.MustParseAddrPort("[fe80::1%eth0]:53")}
	rtts := []time.Duration{0, 999 * time.Nanosecond, 52 * time.Microsecond, 1500 * time.Microsecond,
		20 * time.Second, -3 * time.Millisecond, 1 << 62}
	zones := []*time.Location{time.UTC, time.FixedZone("", 5*3600+30*60)}
	trace := func() *engine.Trace {
		if rng.IntN(3) == 0 {
			return nil
		}
		tr := &engine.Trace{HasParent: rng.IntN(2) == 0}
		tr.ID[0], tr.ID[15], tr.Span[1], tr.Parent[2] = byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32())
		return tr
	}
	var want, got bytes.Buffer
	wantLog, err := telemetry.NewLogger(&want, "json", "info")
	if err != nil {
		t.Fatal(err)
	}
	bw := telemetry.NewBatchWriter(&got)
	gotLog, _ := telemetry.NewLogger(bw, "json", "info")
	ref, o := telemetry.NewObserver(wantLog, nil), telemetry.NewBatchedObserver(gotLog, bw, nil)
	const events = 6000
	for i := range events {
		if i == events-100 {
			bw.Close()
		}
		end := fixedEnd.Add(time.Duration(rng.Int64N(int64(time.Hour)))).In(zones[rng.IntN(len(zones))])
		qname := names[rng.IntN(len(names))]
		a := engine.AttemptEvent{Question: rng.Uint64(), QName: qname, QType: uint16(rng.IntN(300)),
			Scope: scopes[rng.IntN(len(scopes))], Attempt: 1 + rng.IntN(3), Server: servers[rng.IntN(len(servers))],
			Transport: engine.Transport(rng.IntN(2)), Outcome: engine.Outcome(rng.IntN(10)),
			Rcode: rng.IntN(30) - 1, RTT: rtts[rng.IntN(len(rtts))], End: end, Demoted: rng.IntN(2) == 0, Trace: trace()}
		q := engine.QuestionEvent{Question: a.Question, QName: qname, QType: a.QType, Scope: a.Scope,
			Result: engine.Result(rng.IntN(4)), Reason: engine.Reason(rng.IntN(3)), Attempts: rng.IntN(4),
			CacheHit: rng.IntN(2) == 0, Duration: rtts[rng.IntN(len(rtts))], End: end, Trace: trace()}
		if rng.IntN(4) == 0 {
			q.Joined = trace()
		}
		if rng.IntN(8) == 0 {
			q.Served = []*engine.Trace{{ID: [16]byte{1}}, {ID: [16]byte{2}}}
		}
		for _, obs := range []*telemetry.Observer{ref, o} {
			obs.Attempt(a)
			obs.Question(q)
		}
	}
	if got.Len() == 0 || got.String() != want.String() {
		g, w := strings.Split(got.String(), "\n"), strings.Split(want.String(), "\n")
		for i := range min(len(g), len(w)) {
			if g[i] != w[i] {
				t.Fatalf("line %d of %d:\n%s\nwant\n%s", i, len(w), g[i], w[i])
			}
		}
		t.Fatalf("%d lines, want %d", len(g), len(w))
	}
}

// observerInto is an info-level observer writing to buf: through a
// BatchWriter (returned, for the test to Close) when batched, else
// straight through zerolog.
func observerInto(t *testing.T, buf *bytes.Buffer, batched bool) (*telemetry.Observer, *telemetry.BatchWriter) {
	t.Helper()
	var out io.Writer = buf
	var bw *telemetry.BatchWriter
	if batched {
		bw = telemetry.NewBatchWriter(buf)
		out = bw
	}
	log, err := telemetry.NewLogger(out, "json", "info")
	if err != nil {
		t.Fatal(err)
	}
	return telemetry.NewBatchedObserver(log, bw, nil), bw
}
