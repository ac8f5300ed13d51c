package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
)

// Config is one benchmark: the stream and the backends to measure. A nil
// backend is skipped.
type Config struct {
	Stream   StreamOptions
	Kafka    *KafkaOptions
	Postgres *PostgresOptions
	Redis    *RedisOptions
	Logger   *slog.Logger
	// Progress, if set, is called with the backends measured and the
	// backends to measure, after each one.
	Progress func(done, total int64)
}

// Report is what Run measured.
type Report struct {
	Stream *Stream
	Rows   []Row
	// LoadBefore and LoadAfter are the host's one-minute load average
	// before the first backend and after the last (see Host).
	LoadBefore, LoadAfter string
}

// Run generates the stream once and measures every configured backend on
// it, herald first (with herald's backend comes RunTask's row, the stage's
// decision work without Kafka). Every deciding row must accept exactly the stream's
// distinct notifications: Run returns the rows measured so far together
// with an error when a backend fails or any count disagrees.
func Run(ctx context.Context, cfg Config) (rep Report, err error) {
	if cfg.Kafka == nil && cfg.Postgres == nil && cfg.Redis == nil {
		return Report{}, errors.New("bench: no backend to measure")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	s, err := Generate(cfg.Stream)
	if err != nil {
		return Report{}, err
	}
	rep = Report{Stream: s, LoadBefore: LoadAverage()}
	defer func() { rep.LoadAfter = LoadAverage() }()
	log.Info("stream generated", "stream", s.String())
	type backend struct {
		name string
		run  func() ([]Row, error)
	}
	var backends []backend
	if o := cfg.Kafka; o != nil {
		if o.Logger == nil {
			o.Logger = log
		}
		// The decision work alone first, at the largest transaction size.
		backends = append(backends, backend{TaskBackend, func() ([]Row, error) {
			row, err := RunTask(s, o.Policy, o.Partitions, slices.Max(append([]int{1}, o.TxnRecords...)))
			return []Row{row}, err
		}})
		backends = append(backends, backend{KafkaBackend, func() ([]Row, error) { return RunKafka(ctx, s, *o) }})
	}
	if o := cfg.Postgres; o != nil {
		if o.Logger == nil {
			o.Logger = log
		}
		backends = append(backends, backend{PostgresBackend, func() ([]Row, error) { return RunPostgres(ctx, s, *o) }})
	}
	if o := cfg.Redis; o != nil {
		if o.Logger == nil {
			o.Logger = log
		}
		backends = append(backends, backend{RedisBackend, func() ([]Row, error) { return RunRedis(ctx, s, *o) }})
	}
	for i, b := range backends {
		log.Info("measuring", "backend", b.name)
		rows, err := b.run()
		if cfg.Progress != nil && err == nil {
			cfg.Progress(int64(i+1), int64(len(backends)))
		}
		for _, r := range rows {
			if r.Backend != "" {
				rep.Rows = append(rep.Rows, r)
			}
		}
		if err != nil {
			return rep, err
		}
	}
	return rep, CheckAccepted(s, rep.Rows)
}

// CheckAccepted returns an error naming every deciding row whose accepted
// count differs from the stream's distinct notifications, or whose
// decisions do not cover every request.
func CheckAccepted(s *Stream, rows []Row) error {
	var bad []string
	for _, r := range rows {
		if !r.Decides() {
			continue
		}
		if r.Accepted != s.Distinct || r.Decisions != len(s.Requests) {
			bad = append(bad, fmt.Sprintf("%s (%s) accepted %d of %d requests with %d decisions",
				r.Backend, r.Variant, r.Accepted, r.Records, r.Decisions))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("bench: the backends disagree; the stream has %d distinct notifications in %d requests, but %s",
			s.Distinct, len(s.Requests), strings.Join(bad, "; "))
	}
	return nil
}
