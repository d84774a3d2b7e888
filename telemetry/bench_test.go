package telemetry_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"

	"github.com/dohfwd/dohfwd/engine"

	"github.com/dohfwd/dohfwd/telemetry"
)

// BenchmarkQuestionEvents is the logging cost of one forwarded question at
// level info (an attempt and a question event) into a file, written event
// by event and through a BatchWriter. Reported, not asserted.
func BenchmarkQuestionEvents(b *testing.B) {
	qe := engine.QuestionEvent{Question: 1, QName: "www.example.org.", QType: 1, Scope: "corp", Result: engine.ResultAnswer, Attempts: 1}
	for _, batched := range []bool{false, true} {
		name := "direct"
		if batched {
			name = "batched"
		}
		b.Run(name, func(b *testing.B) {
			f, err := os.Create(filepath.Join(b.TempDir(), "log"))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			var log zerolog.Logger
			if batched {
				bw := telemetry.NewBatchWriter(f)
				defer bw.Close()
				log, _ = telemetry.NewLogger(bw, "json", "info")
			} else {
				log, _ = telemetry.NewLogger(f, "json", "info")
			}
			o := telemetry.NewObserver(log, nil)
			b.ReportAllocs()
			for b.Loop() {
				o.Attempt(sampleAttempt)
				o.Question(qe)
			}
		})
	}
}
