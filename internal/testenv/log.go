package testenv

import (
	"log/slog"
	"os"
)

// Stages run in process by tests log through slog's default logger; keep
// the verbose test log readable by showing warnings and errors only, unless
// HERALD_TEST_LOG_LEVEL says otherwise (debug, info, warn, error).
func init() {
	level := slog.LevelWarn
	if v, ok := os.LookupEnv("HERALD_TEST_LOG_LEVEL"); ok {
		level.UnmarshalText([]byte(v))
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
}
