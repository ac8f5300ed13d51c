package sinks

import (
	"log/slog"
	"strconv"
	"testing"
)

type slogLogger = slog.Logger

func newTestLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) { w.t.Log(string(b)); return len(b), nil }

func strconvItoa(n int) string { return strconv.Itoa(n) }
