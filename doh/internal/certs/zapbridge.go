package certs

import (
	"github.com/rs/zerolog"
	"go.uber.org/zap/zapcore"
)

// zerologCore is a zapcore.Core that writes certmagic's zap log entries to
// a zerolog logger, so they share dohfwd's log stream and level.
type zerologCore struct {
	log    zerolog.Logger
	fields []zapcore.Field
}

func newZerologCore(log zerolog.Logger) zapcore.Core { return &zerologCore{log: log} }

// zerologLevel maps zap levels; panic and fatal become errors because a
// library's log line must never stop dohfwd.
func zerologLevel(l zapcore.Level) zerolog.Level {
	switch {
	case l <= zapcore.DebugLevel:
		return zerolog.DebugLevel
	case l == zapcore.InfoLevel:
		return zerolog.InfoLevel
	case l == zapcore.WarnLevel:
		return zerolog.WarnLevel
	default:
		return zerolog.ErrorLevel
	}
}

func (c *zerologCore) Enabled(l zapcore.Level) bool {
	zl := zerologLevel(l)
	return zl >= c.log.GetLevel() && zl >= zerolog.GlobalLevel()
}

func (c *zerologCore) With(fields []zapcore.Field) zapcore.Core {
	all := make([]zapcore.Field, 0, len(c.fields)+len(fields))
	all = append(append(all, c.fields...), fields...)
	return &zerologCore{log: c.log, fields: all}
}

func (c *zerologCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *zerologCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fields {
		f.AddTo(enc)
	}
	ev := c.log.WithLevel(zerologLevel(e.Level))
	if e.LoggerName != "" {
		ev = ev.Str("logger", e.LoggerName)
	}
	ev.Fields(enc.Fields).Msg(e.Message)
	return nil
}

func (c *zerologCore) Sync() error { return nil }
