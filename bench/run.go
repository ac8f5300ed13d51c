package bench

import (
	"cmp"
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
	// Rounds is how many times every backend is measured: round 1 measures
	// each in turn, then round 2 again each in turn, and so on, so a host
	// whose speed drifts (a shared machine, a neighbour on the same
	// hypervisor) slows every backend alike instead of the one measured at
	// the wrong moment. Each row then is the median round (see
	// Summarize). Zero means one round.
	Rounds int
	// Progress, if set, is called with the backend runs done and the
	// backend runs to do (backends × rounds), after each one.
	Progress func(done, total int64)
}

// Report is what Run measured.
type Report struct {
	Stream *Stream
	// Rows is one row per backend and variant: with more than one round,
	// the median round's (see Summarize).
	Rows []Row
	// Rounds is every round's rows, in the order measured.
	Rounds [][]Row
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
			var rows []Row
			for _, f := range o.formats() {
				row, err := RunTask(s, o.Policy, o.Partitions, slices.Max(append([]int{1}, o.TxnRecords...)), f)
				if err != nil {
					return rows, err
				}
				rows = append(rows, row)
			}
			return rows, nil
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
	rounds := max(cfg.Rounds, 1)
	defer func() { rep.Rows = Summarize(rep.Rounds) }()
	for round := range rounds {
		rep.Rounds = append(rep.Rounds, nil)
		for i, b := range backends {
			log.Info("measuring", "backend", b.name, "round", round+1, "rounds", rounds)
			rows, err := b.run()
			if cfg.Progress != nil && err == nil {
				cfg.Progress(int64(round*len(backends)+i+1), int64(rounds*len(backends)))
			}
			for _, r := range rows {
				if r.Backend != "" {
					rep.Rounds[round] = append(rep.Rounds[round], r)
				}
			}
			if err != nil {
				return rep, err
			}
		}
	}
	return rep, CheckAccepted(s, slices.Concat(rep.Rounds...))
}

// Summarize folds rounds of rows into one row per measurement: every
// round measures the same backends in the same order, so the i-th row of
// each round is one measurement repeated. Its row is that of the median
// round by elapsed time (of an even count, the slower of the two middle
// rounds), whose note then says how many rounds ran and the range of their
// records/s. A measurement made in one round only (a single round, or a
// round cut short by an error) is returned as it is.
func Summarize(rounds [][]Row) []Row {
	var out []Row
	for i := 0; ; i++ {
		var rs []Row
		for _, rows := range rounds {
			if i < len(rows) {
				rs = append(rs, rows[i])
			}
		}
		switch len(rs) {
		case 0:
			return out
		case 1:
			out = append(out, rs[0])
			continue
		}
		slices.SortStableFunc(rs, func(a, b Row) int { return cmp.Compare(a.Elapsed, b.Elapsed) })
		m := rs[len(rs)/2]
		fastest, slowest := rs[0], rs[len(rs)-1]
		m.Note = fmt.Sprintf("median of %d rounds, %.0f–%.0f records/s; %s", len(rs),
			slowest.PerSecond(slowest.Records), fastest.PerSecond(fastest.Records), m.Note)
		out = append(out, m)
	}
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
