package telemetry

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// TestTimestampAsRFC3339Nano: the time field reads as time.RFC3339Nano
// writes it, whatever the fraction (none, trailing zeros, full), the zone
// and the second, also when times of other seconds and zones alternate
// (the cached text must follow).
func TestTimestampAsRFC3339Nano(t *testing.T) {
	zones := []*time.Location{time.UTC, time.FixedZone("", -7*3600), time.FixedZone("", 5*3600+30*60)}
	if berlin, err := time.LoadLocation("Europe/Berlin"); err == nil {
		zones = append(zones, berlin)
	}
	base := time.Date(2026, 3, 29, 0, 59, 58, 0, time.UTC) // across Berlin's switch to summer time
	for _, ns := range []int{0, 1, 10, 120, 999_999_999, 500_000_000, 123_456_789, 100_000} {
		for step := range 4 {
			for _, z := range zones {
				tm := base.Add(time.Duration(step)*time.Second + time.Duration(ns)).In(z)
				if got, want := string(appendRFC3339Nano(nil, tm)), tm.Format(time.RFC3339Nano); got != want {
					t.Fatalf("%v: %s, want %s", tm, got, want)
				}
			}
		}
	}
	// Years of other than four digits (the date is kept as 19 bytes).
	for _, y := range []int{12026, -1, 0, 999, 9999} {
		tm := time.Date(y, 1, 2, 3, 4, 5, 600, time.UTC)
		if got, want := string(appendRFC3339Nano(nil, tm)), tm.Format(time.RFC3339Nano); got != want {
			t.Fatalf("year %d: %s, want %s", y, got, want)
		}
	}
}

// TestTimestampHookWritesTheTime: an event of NewLogger carries "time",
// a time within the call, readable with zerolog's own format.
func TestTimestampHookWritesTheTime(t *testing.T) {
	var buf bytes.Buffer
	log, err := NewLogger(&buf, "json", "info")
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	log.Info().Str("k", "v").Msg("m")
	after := time.Now()
	var ev map[string]any
	if err := json.Unmarshal(buf.Bytes(), &ev); err != nil {
		t.Fatalf("%s: %v", buf.Bytes(), err)
	}
	s, _ := ev[zerolog.TimestampFieldName].(string)
	tm, err := time.Parse(zerolog.TimeFieldFormat, s)
	if err != nil || tm.Before(before) || tm.After(after) {
		t.Errorf("time %q (%v) not within [%v, %v]", s, err, before, after)
	}
	if ev["k"] != "v" || ev["message"] != "m" {
		t.Errorf("event %s", buf.Bytes())
	}
}

// TestFractionAsTimeFormat: the fraction of a second reads as
// time.RFC3339Nano writes it, for every digit in every place and many
// random nanoseconds.
func TestFractionAsTimeFormat(t *testing.T) {
	var values []int
	for p := 1; p < 1e9; p *= 10 {
		for d := 1; d <= 9; d++ {
			values = append(values, d*p, d*p+1, 1e9-d*p)
		}
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for range 100_000 {
		values = append(values, 1+rng.IntN(1e9-1))
	}
	base := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, ns := range values {
		tm := base.Add(time.Duration(ns))
		if got, want := string(appendRFC3339Nano(nil, tm)), tm.Format(time.RFC3339Nano); got != want {
			t.Fatalf("%d ns: %s, want %s", ns, got, want)
		}
	}
}
