package certs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/zap"
)

func TestZapLinesLandInTheZerologStream(t *testing.T) {
	t.Parallel()
	buf := &logBuffer{}
	zl := zerolog.New(buf).Level(zerolog.InfoLevel).With().Str("component", "certs").Logger()
	z := zap.New(newZerologCore(zl)).Named("obtain").With(zap.String("identifier", "doh.example"))

	z.Debug("hidden below the zerolog level")
	z.Info("certificate obtained successfully", zap.Int("attempt", 2))
	z.Error("could not get certificate", zap.Error(errors.New("boom")))
	z.DPanic("must not panic")

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("got %d lines, want 3 (debug filtered):\n%s", len(lines), buf)
	}
	for i, want := range [][]string{
		{`"level":"info"`, `"component":"certs"`, `"logger":"obtain"`, `"identifier":"doh.example"`, `"attempt":2`, `"message":"certificate obtained successfully"`},
		{`"level":"error"`, `"error":"boom"`, `"message":"could not get certificate"`},
		{`"level":"error"`, `"message":"must not panic"`},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i], w) {
				t.Errorf("line %d %s lacks %s", i, lines[i], w)
			}
		}
	}
}

func TestACMESaysWhyItHasNoCertificate(t *testing.T) {
	t.Parallel()
	closedPort := freePort(t) // nothing listens: the CA is unreachable
	log, logs := testLogger(t)
	cfg := Config{Mode: ModeACME, ACME: ACMEConfig{
		Domains: []string{"down.doh.test"},
		CA:      fmt.Sprintf("https://127.0.0.1:%d/dir", closedPort),
		Storage: t.TempDir(),
	}}
	m, err := New(context.Background(), cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	mustClose(t, m)
	if m.Fingerprint() != "" {
		t.Errorf("Fingerprint() = %q before any certificate, want empty", m.Fingerprint())
	}
	eventually(t, 10*time.Second, "a logged obtain failure", func() bool {
		return strings.Contains(logs.String(), "could not obtain a certificate")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err = m.WaitReady(ctx)
	if err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("WaitReady = %v, want the last failure (connection refused)", err)
	}
	out := logs.String()
	if !strings.Contains(out, "waiting for a certificate from the ACME CA") {
		t.Error("no log line saying it waits for a certificate")
	}
	if line := linesWith(out, "could not obtain a certificate"); !strings.Contains(line, `"level":"error"`) || !strings.Contains(line, "connection refused") {
		t.Errorf("failure line lacks level error or the reason:\n%s", line)
	}
}
