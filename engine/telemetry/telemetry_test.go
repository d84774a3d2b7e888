package telemetry_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/rs/zerolog"

	"github.com/dohfwd/dohfwd/doh/metrics"
	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/telemetry"
)

var sampleAttempt = engine.AttemptEvent{
	Question: 7, QName: "www.example.org.", QType: dns.TypeAAAA, Scope: "corp", Attempt: 2,
	Server: netip.MustParseAddrPort("[2001:db8::53]:5353"), Transport: engine.TCP,
	Outcome: engine.OutcomeTimeout, Rcode: -1, RTT: 2 * time.Second, Demoted: true,
}

func TestAttemptEventHasEveryField(t *testing.T) {
	var buf bytes.Buffer
	o := telemetry.NewObserver(zerolog.New(&buf), nil)
	o.Attempt(sampleAttempt)
	var got map[string]any
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("%v: %s", err, buf.Bytes())
	}
	want := map[string]any{
		"message": "attempt", "level": "info", "question": 7.0, "qname": "www.example.org.", "qtype": "AAAA",
		"scope": "corp", "attempt": 2.0, "server": "[2001:db8::53]:5353", "transport": "tcp",
		"outcome": "timeout", "rcode": "", "rtt_ms": 2000.0, "demoted": true,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v (%T), want %v", k, got[k], got[k], v)
		}
	}
}

func TestQuestionEventHasEveryField(t *testing.T) {
	var buf bytes.Buffer
	o := telemetry.NewObserver(zerolog.New(&buf), nil)
	o.Question(engine.QuestionEvent{Question: 9, QName: "a.example.", QType: dns.TypeA, Scope: "fallback",
		Result: engine.ResultUnavailable, Reason: engine.ReasonAttemptsSpent, Attempts: 3, Duration: 1500 * time.Microsecond})
	var got map[string]any
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]any{"message": "question", "question": 9.0, "result": "unavailable",
		"reason": "attempts spent", "attempts": 3.0, "cache_hit": false, "duration_ms": 1.5, "qtype": "A"} {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}

func TestAttemptEventDoesNotAllocate(t *testing.T) {
	m := metrics.NewMetrics()
	o := telemetry.NewObserver(zerolog.New(io.Discard), m)
	o.Attempt(sampleAttempt) // creates the server's histogram series
	if n := testing.AllocsPerRun(200, func() { o.Attempt(sampleAttempt) }); n != 0 {
		t.Fatalf("Attempt allocates %v times per event", n)
	}
	qe := engine.QuestionEvent{Question: 1, QName: "a.", QType: 1, Result: engine.ResultAnswer}
	if n := testing.AllocsPerRun(200, func() { o.Question(qe) }); n != 0 {
		t.Fatalf("Question allocates %v times per event", n)
	}
}

func TestLevelFiltersEvents(t *testing.T) {
	var buf bytes.Buffer
	log, err := telemetry.NewLogger(&buf, "json", "warn")
	if err != nil {
		t.Fatal(err)
	}
	defer telemetry.SetLevel("info")
	telemetry.NewObserver(log, nil).Attempt(sampleAttempt)
	if buf.Len() != 0 {
		t.Fatalf("info event written at warn: %s", buf.Bytes())
	}
	telemetry.SetLevel("debug")
	telemetry.NewObserver(log, nil).Attempt(sampleAttempt)
	if !strings.Contains(buf.String(), `"message":"attempt"`) {
		t.Fatalf("no event after telemetry.SetLevel: %q", buf.String())
	}
	if _, err := telemetry.NewLogger(&buf, "json", "loud"); err == nil {
		t.Fatal("bad level accepted")
	}
}

func TestProbeEventFields(t *testing.T) {
	var buf bytes.Buffer
	o := telemetry.NewObserver(zerolog.New(&buf), nil)
	o.Probe(engine.ProbeEvent{Server: "127.0.0.1:53", Transport: engine.UDP, Outcome: engine.OutcomeTimeout, RTT: 2 * time.Second})
	var got map[string]any
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("%v: %s", err, buf.Bytes())
	}
	for k, v := range map[string]any{"message": "probe", "server": "127.0.0.1:53", "transport": "udp",
		"outcome": "timeout", "rtt_ms": 2000.0, "cleared": false} {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}

func TestLineWriterKeepsStderrJSON(t *testing.T) {
	var buf bytes.Buffer
	log, err := telemetry.NewLogger(&buf, "json", "debug")
	if err != nil {
		t.Fatal(err)
	}
	defer telemetry.SetLevel("info")
	w := telemetry.LineWriter(log)
	w.Write([]byte("http: TLS handshake error from 127.0.0.1:5: remote error: tls: unknown certificate\n"))
	w.Write([]byte("certmagic: something happened\n"))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines: %q", len(lines), buf.String())
	}
	for i, want := range []string{"debug", "warn"} {
		var got map[string]any
		if err := json.Unmarshal([]byte(lines[i]), &got); err != nil {
			t.Fatalf("line %d is not JSON: %q", i, lines[i])
		}
		if got["level"] != want || got["component"] != "stdlog" || strings.HasSuffix(got["message"].(string), "\n") {
			t.Errorf("line %d: %v", i, got)
		}
	}
}

// The tally counts each attempt into the first bucket whose bound is at
// least its RTT, as a Prometheus histogram does, and forgets servers a
// reload dropped.
func TestLatencyTallyBuckets(t *testing.T) {
	tally := telemetry.NewLatencyTally()
	a := netip.MustParseAddrPort("127.0.0.1:53")
	b := netip.MustParseAddrPort("127.0.0.2:53")
	for _, rtt := range []time.Duration{500 * time.Microsecond, time.Millisecond, 3 * time.Second, 9 * time.Second} {
		tally.ObserveAttempt(engine.AttemptEvent{Server: a, RTT: rtt})
	}
	tally.ObserveAttempt(engine.AttemptEvent{Server: b, RTT: time.Millisecond})
	h := tally.Snapshot()[a.String()]
	last := len(telemetry.LatencyBuckets)
	if len(h.Counts) != last+1 || h.Counts[0] != 2 || h.Counts[last-1] != 1 || h.Counts[last] != 1 {
		t.Errorf("counts %v", h.Counts)
	}
	if h.Sum < 12 || h.Sum > 12.01 {
		t.Errorf("sum %v, want about 12.0015", h.Sum)
	}
	tally.ForgetServers(func(ap netip.AddrPort) bool { return ap == b })
	if snap := tally.Snapshot(); len(snap) != 1 || snap[b.String()].Counts == nil {
		t.Errorf("after forgetting %v: %v", a, snap)
	}
}

// The trace goes on the events as hex: trace_id, this server's span_id,
// the caller's parent_id; a question that served others lists their
// trace ids, one that waited names the trace it joined.
func TestTraceFields(t *testing.T) {
	own := &engine.Trace{ID: [16]byte{0xab, 1}, Span: [8]byte{0xcd}, Parent: [8]byte{0xef}, HasParent: true}
	other := &engine.Trace{ID: [16]byte{0x12}}
	var buf bytes.Buffer
	o := telemetry.NewObserver(zerolog.New(&buf), nil)
	att := sampleAttempt
	att.Trace = own
	o.Attempt(att)
	o.Question(engine.QuestionEvent{QName: "a.example.", Trace: own, Served: []*engine.Trace{other}})
	o.Question(engine.QuestionEvent{QName: "a.example.", Trace: other, Joined: own})
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	quiet := telemetry.NewObserver(zerolog.New(io.Discard), nil)
	if n := testing.AllocsPerRun(100, func() { quiet.Attempt(att) }); n != 0 {
		t.Errorf("a traced attempt event allocates %v times", n)
	}
	for i, want := range []string{
		`"trace_id":"ab010000000000000000000000000000","span_id":"cd00000000000000","parent_id":"ef00000000000000"`,
		`"trace_id":"ab010000000000000000000000000000","span_id":"cd00000000000000","parent_id":"ef00000000000000","trace_ids":["ab010000000000000000000000000000","12000000000000000000000000000000"]`,
		`"trace_id":"12000000000000000000000000000000","span_id":"0000000000000000","joined_trace_id":"ab010000000000000000000000000000"`,
	} {
		if !strings.Contains(lines[i], want) {
			t.Errorf("event %d: %s\nlacks %s", i, lines[i], want)
		}
	}
}

// The longest name a question can have is written without allocating,
// with every per-question field of either event.
func TestLongestNameDoesNotAllocate(t *testing.T) {
	o := telemetry.NewObserver(zerolog.New(io.Discard), nil)
	name := strings.Repeat(strings.Repeat("a", 62)+".", 5)[:253]
	tr := &engine.Trace{HasParent: true}
	a := sampleAttempt
	a.QName, a.Trace, a.RTT = name, tr, 1234567*time.Microsecond
	q := engine.QuestionEvent{Question: 1<<64 - 1, QName: name, QType: 1, Result: engine.ResultAnswer,
		Duration: 7654321 * time.Microsecond, Trace: tr, Joined: tr}
	o.Attempt(a)
	o.Question(q)
	if n := testing.AllocsPerRun(200, func() { o.Attempt(a) }); n != 0 {
		t.Errorf("Attempt with a %d-byte name allocates %v times per event", len(name), n)
	}
	if n := testing.AllocsPerRun(200, func() { o.Question(q) }); n != 0 {
		t.Errorf("Question with a %d-byte name allocates %v times per event", len(name), n)
	}
}
