package telemetry

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/rs/zerolog"
)

// TestMillisAsZerologFloat: appendMillis writes what zerolog's Float64
// writes for the same milliseconds, at the edges of the fraction and the
// range it takes (the rest is left to Float64).
func TestMillisAsZerologFloat(t *testing.T) {
	values := []int64{0, 1, 9, 10, 99, 100, 101, 999, 1000, 1001, 1010, 1100, 1500, 52, 2_000_000, 123_456_789, 1e12 - 1}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 100_000 {
		values = append(values, rng.Int64N(1e12))
	}
	var buf bytes.Buffer
	log := zerolog.New(&buf)
	for _, us := range values {
		buf.Reset()
		log.Log().Float64("k", float64(us)/1000).Send()
		want := bytes.TrimSuffix(bytes.TrimPrefix(buf.Bytes(), []byte(`{"k":`)), []byte("}\n"))
		if got := appendMillis(nil, us); !bytes.Equal(got, want) {
			t.Fatalf("%d µs: %s, want %s", us, got, want)
		}
	}
}
