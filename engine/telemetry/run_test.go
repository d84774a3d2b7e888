package telemetry

import (
	"bytes"
	"encoding/hex"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// TestHexAsZerologWrites: appendHex writes what zerolog's Hex writes, for
// the lengths of trace ids and spans and the lengths around them, with
// every byte value in every position.
func TestHexAsZerologWrites(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var buf bytes.Buffer
	log := zerolog.New(&buf)
	for n := range 26 {
		for i := range 300 {
			id := make([]byte, n)
			for j := range id {
				id[j] = byte(rng.Uint32())
				if i < 256 {
					id[j] = byte(i + j)
				}
			}
			buf.Reset()
			log.Log().Hex("k", id).Send()
			want := strings.TrimSuffix(strings.TrimPrefix(buf.String(), `{"k":`), "}\n")
			if got := string(appendHex([]byte("x"), id)); got != "x"+want {
				t.Fatalf("%x: %s, want x%s", id, got, want)
			}
			if want != `"`+hex.EncodeToString(id)+`"` {
				t.Fatalf("zerolog's Hex is not lowercase hex: %s", want)
			}
		}
	}
}

// plainByte is the byte-at-a-time rule plainJSON must match.
func plainByte(c byte) bool { return c >= 0x20 && c <= 0x7e && c != '"' && c != '\\' }

// TestPlainJSONFindsEveryByteThatNeedsEscaping: plainJSON is false exactly
// when some byte of the string needs escaping (or is not ASCII), with
// that byte at every position of strings up to 24 bytes, next to plain
// bytes and to other bytes that need escaping.
func TestPlainJSONFindsEveryByteThatNeedsEscaping(t *testing.T) {
	fillers := []byte{'a', 0x20, 0x7e, 0x21, '"' + 1, '\\' - 1, 0x1f, 0xff, 0x80}
	for n := 1; n <= 24; n++ {
		for pos := range n {
			for c := range 256 {
				for _, f := range fillers {
					s := []byte(strings.Repeat(string(rune(0)), n))
					for i := range s {
						s[i] = f
					}
					s[pos] = byte(c)
					want := true
					for _, b := range s {
						want = want && plainByte(b)
					}
					if got := plainJSON(string(s)); got != want {
						t.Fatalf("plainJSON(%q) = %v, want %v", s, got, want)
					}
				}
			}
		}
	}
	if !plainJSON("n12345.bench.test.") || !plainJSON("") {
		t.Fatal("a plain name is not plain")
	}
}

// TestRunAsZerologWrites: the raw run of an event's fields reads byte for
// byte as zerolog's Event API writes the same fields in the same order,
// names that need escaping (zerolog writes those) included.
func TestRunAsZerologWrites(t *testing.T) {
	names := []string{"www.example.org.", "a.", "", "quote\".example.", "back\\slash.", "tab\t.", "ünïcode.",
		"bad\xff.", "ctl\x01.", strings.Repeat("long-label.", 40)}
	durations := []time.Duration{0, time.Microsecond, 1520 * time.Microsecond, -3 * time.Millisecond,
		1e12 * time.Microsecond, 5e15 * time.Microsecond}
	end := time.Date(2026, 12, 1, 12, 0, 0, 123456000, time.UTC)
	var got, want bytes.Buffer
	log, ref := zerolog.New(&got), zerolog.New(&want)
	for _, name := range names {
		for _, d := range durations {
			got.Reset()
			want.Reset()
			var b [runSize]byte
			e, key, r := startRun(log.Log(), b[:0], 42, name, "rtt_ms", d)
			e.RawJSON(key, appendTime(appendKey(r, "time"), end)).Send()
			ref.Log().Uint64("question", 42).Str("qname", name).
				Float64("rtt_ms", float64(d.Microseconds())/1000).Str("time", end.Format(time.RFC3339Nano)).Send()
			if got.String() != want.String() {
				t.Errorf("run\n%s\nwant\n%s", got.Bytes(), want.Bytes())
			}
		}
	}
}
