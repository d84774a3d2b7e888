package telemetry

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/rs/zerolog"
)

func init() {
	zerolog.TimeFieldFormat = time.RFC3339Nano
	zerolog.DurationFieldUnit = time.Millisecond
	zerolog.DurationFieldInteger = false
}

// ParseLevel reads a configured level: debug, info, warn or error.
func ParseLevel(s string) (zerolog.Level, error) {
	switch s {
	case "debug":
		return zerolog.DebugLevel, nil
	case "info", "":
		return zerolog.InfoLevel, nil
	case "warn":
		return zerolog.WarnLevel, nil
	case "error":
		return zerolog.ErrorLevel, nil
	}
	return zerolog.NoLevel, fmt.Errorf("log level %q: want debug, info, warn or error", s)
}

// NewLogger returns the process logger writing to w: JSON, or zerolog's
// console format when format is "console", or "auto" and w is a terminal.
//
// The level is process-wide (zerolog's global level) so that SetLevel on
// reload reaches every logger derived from this one.
func NewLogger(w io.Writer, format, level string) (zerolog.Logger, error) {
	lvl, err := ParseLevel(level)
	if err != nil {
		return zerolog.Nop(), err
	}
	if format == "console" || (format == "auto" && isTerminal(w)) {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: "15:04:05.000"}
	}
	zerolog.SetGlobalLevel(lvl)
	return zerolog.New(w).Level(zerolog.DebugLevel).Hook(timestampHook{}), nil
}

// SetLevel changes the level of every logger; it is how a reload applies
// log.level.
func SetLevel(level string) error {
	lvl, err := ParseLevel(level)
	if err != nil {
		return err
	}
	zerolog.SetGlobalLevel(lvl)
	return nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// LineWriter returns a writer that puts each line written by Go's log
// package (net/http's error log, libraries that use log.Printf) into the
// zerolog stream, so stderr stays JSON. TLS handshake failures are the
// clients' own (scanners, browsers that do not trust the certificate):
// debug; any other line: warn.
func LineWriter(log zerolog.Logger) io.Writer { return lineWriter{log} }

type lineWriter struct{ log zerolog.Logger }

func (w lineWriter) Write(p []byte) (int, error) {
	ev := w.log.Warn()
	if bytes.HasPrefix(p, []byte("http: TLS handshake error")) {
		ev = w.log.Debug()
	}
	ev.Str("component", "stdlog").Msg(string(bytes.TrimSpace(p)))
	return len(p), nil
}
