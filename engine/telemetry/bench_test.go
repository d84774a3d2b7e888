package telemetry_test

import (
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/engine"

	"github.com/dohfwd/dohfwd/engine/telemetry"
)

// BenchmarkQuestionEvents is the logging cost of one forwarded question at
// level info (an attempt and a question event, as the engine reports them
// for a DoH request: with a trace and the engine's times) into a file,
// written event by event and through a BatchWriter (the events encoded
// straight into its batch, as in the server). Reported, not asserted.
func BenchmarkQuestionEvents(b *testing.B) {
	tr := &engine.Trace{ID: [16]byte{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		Span: [8]byte{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}}
	end := time.Now()
	ae := engine.AttemptEvent{Question: 123456, QName: "n12345.bench.test.", QType: dns.TypeA, Scope: "bench",
		Attempt: 1, Server: netip.MustParseAddrPort("127.0.0.1:5353"), Transport: engine.UDP,
		Outcome: engine.OutcomeAnswer, Rcode: dns.RcodeSuccess, RTT: 52 * time.Microsecond, End: end, Trace: tr}
	qe := engine.QuestionEvent{Question: 123456, QName: "n12345.bench.test.", QType: dns.TypeA, Scope: "bench",
		Result: engine.ResultAnswer, Attempts: 1, Duration: 130 * time.Microsecond, End: end, Trace: tr}
	// direct: a write(2) per event; batched: through a BatchWriter;
	// discard: through a BatchWriter to io.Discard, the events' own cost
	// without the kernel's; parallel: batched, from GOMAXPROCS goroutines
	// at once (the BatchWriter's lock shared, as in the server).
	for _, name := range []string{"direct", "batched", "discard", "parallel"} {
		b.Run(name, func(b *testing.B) {
			var out io.Writer = io.Discard
			if name != "discard" {
				f, err := os.Create(filepath.Join(b.TempDir(), "log"))
				if err != nil {
					b.Fatal(err)
				}
				defer f.Close()
				out = f
			}
			var bw *telemetry.BatchWriter // nil: direct
			if name != "direct" {
				bw = telemetry.NewBatchWriter(out)
				defer bw.Close()
				out = bw
			}
			log, _ := telemetry.NewLogger(out, "json", "info")
			o := telemetry.NewBatchedObserver(log, bw, nil) // as the server has it
			b.ReportAllocs()
			if name == "parallel" {
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						o.Attempt(ae)
						o.Question(qe)
					}
				})
				return
			}
			for b.Loop() {
				o.Attempt(ae)
				o.Question(qe)
			}
		})
	}
}
