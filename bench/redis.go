package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heraldhq/herald/schemas"
)

// RedisOptions configure the Redis backend: `SET key val NX PX window` per
// request, the key naming the dedupe scope; OK means accepted, a nil reply
// a repeat.
type RedisOptions struct {
	// Addr is host:port.
	Addr string
	// Batch is the number of commands per pipeline of the pipelined variant,
	// 1000 by default.
	Batch int
	// Conns is the number of connections, 1 by default: the stream is split
	// among them by dedupe scope and they send concurrently.
	Conns int
	// Window is the PX expiry, the dedupe window (one hour by default).
	Window time.Duration
	Logger *slog.Logger
}

// RedisBackend is the name of the Redis rows.
const RedisBackend = "redis"

// RunRedis measures SET NX PX on s: one command per round trip, then
// pipelined. Each variant uses keys of its own, unlinked afterwards (not
// timed). Timing starts with every connection open and ends with the last
// reply.
func RunRedis(ctx context.Context, s *Stream, o RedisOptions) ([]Row, error) {
	if o.Addr == "" {
		return nil, errors.New("bench: redis: address is required")
	}
	if o.Batch <= 0 {
		o.Batch = 1000
	}
	if o.Conns <= 0 {
		o.Conns = 1
	}
	if o.Window <= 0 {
		o.Window = time.Hour
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	rdb := redis.NewClient(&redis.Options{
		Addr:     o.Addr,
		PoolSize: o.Conns + 1,
		// A retried SET NX would answer "repeat" to its own first try.
		MaxRetries:      -1,
		DisableIdentity: true,
	})
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("bench: redis: ping %s: %w", o.Addr, err)
	}
	px := o.Window.Milliseconds()
	run := randomHex(4)
	setNX := func(ctx context.Context, c doer, key string, r schemas.Request) *redis.Cmd {
		return c.Do(ctx, "SET", key, r.RequestID, "NX", "PX", px)
	}
	// accepted reads one SET NX reply: OK, or nil for a repeat.
	accepted := func(cmd *redis.Cmd) (int, error) {
		switch err := cmd.Err(); {
		case err == nil:
			return 1, nil
		case errors.Is(err, redis.Nil):
			return 0, nil
		default:
			return 0, err
		}
	}
	type work func(ctx context.Context, keys []string, reqs []schemas.Request) (int, error)
	variants := []struct {
		name string
		work work
	}{
		{"SET NX PX, 1 per round trip", func(ctx context.Context, keys []string, reqs []schemas.Request) (int, error) {
			n := 0
			for i, r := range reqs {
				a, err := accepted(setNX(ctx, rdb, keys[i], r))
				if err != nil {
					return n, fmt.Errorf("SET NX of request %s: %w", r.RequestID, err)
				}
				n += a
			}
			return n, nil
		}},
		{fmt.Sprintf("SET NX PX, pipeline of %d", o.Batch), func(ctx context.Context, keys []string, reqs []schemas.Request) (int, error) {
			n := 0
			for off := 0; off < len(reqs); off += o.Batch {
				end := min(off+o.Batch, len(reqs))
				pipe := rdb.Pipeline()
				cmds := make([]*redis.Cmd, 0, end-off)
				for i := off; i < end; i++ {
					cmds = append(cmds, setNX(ctx, pipe, keys[i], reqs[i]))
				}
				// Exec reports the first failed command, and a repeat's nil
				// reply counts as one: read every reply instead.
				if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
					return n, fmt.Errorf("pipeline: %w", err)
				}
				for i, cmd := range cmds {
					a, err := accepted(cmd)
					if err != nil {
						return n, fmt.Errorf("pipelined SET NX of request %s: %w", reqs[off+i].RequestID, err)
					}
					n += a
				}
			}
			return n, nil
		}},
	}

	durability, err := redisDurability(ctx, rdb)
	if err != nil {
		return nil, err
	}
	shards := shard(s.Requests, o.Conns)
	meter := newCPUMeter(o.Addr)
	var rows []Row
	for vi, v := range variants {
		keys := make([][]string, len(shards))
		for i, reqs := range shards {
			keys[i] = make([]string, len(reqs))
			for j, r := range reqs {
				keys[i][j] = fmt.Sprintf("herald-bench:%s:%d:dedupe:%s", run, vi, scope(r))
			}
		}
		// Open every connection before timing.
		if err := warm(ctx, rdb, len(shards)); err != nil {
			return rows, err
		}
		acc, sp, err := timed(ctx, meter, shards, func(ctx context.Context, i int, reqs []schemas.Request) (int, error) {
			return v.work(ctx, keys[i], reqs)
		})
		if err != nil {
			return rows, fmt.Errorf("bench: redis: %s: %w", v.name, err)
		}
		row := Row{Backend: RedisBackend, Variant: v.name + connsNote(len(shards)), Records: len(s.Requests), Accepted: acc, Decisions: len(s.Requests),
			Elapsed: sp.elapsed, CPU: sp.cpu, ServerCPU: sp.serverCPU, Note: durability}
		rows = append(rows, row)
		stored, err := unlink(context.WithoutCancel(ctx), rdb, keys, o.Batch)
		if err != nil {
			return rows, err
		}
		if stored != acc {
			return rows, fmt.Errorf("bench: redis: %s: %d keys set but %d found afterwards", v.name, acc, stored)
		}
		o.Logger.Info("stream decided", "backend", RedisBackend, "variant", v.name, "elapsed", sp.elapsed.Round(time.Millisecond), "accepted", acc)
	}
	return rows, nil
}

// doer is a client or a pipeline.
type doer interface {
	Do(ctx context.Context, args ...any) *redis.Cmd
}

// warm opens n pooled connections by holding n pings in flight at once.
func warm(ctx context.Context, rdb *redis.Client, n int) error {
	errs := make(chan error, n)
	for range n {
		go func() { errs <- rdb.Ping(ctx).Err() }()
	}
	var err error
	for range n {
		err = errors.Join(err, <-errs)
	}
	if err != nil {
		return fmt.Errorf("bench: redis: ping: %w", err)
	}
	return nil
}

// unlink deletes keys in pipelined UNLINKs of batch keys and returns how
// many existed.
func unlink(ctx context.Context, rdb *redis.Client, keys [][]string, batch int) (int, error) {
	var all []string
	for _, ks := range keys {
		all = append(all, ks...)
	}
	n := 0
	for off := 0; off < len(all); off += batch {
		got, err := rdb.Unlink(ctx, all[off:min(off+batch, len(all))]...).Result()
		if err != nil {
			return n, fmt.Errorf("bench: redis: unlink benchmark keys: %w", err)
		}
		n += int(got)
	}
	return n, nil
}

// redisDurability names the settings that decide whether an OK survives a
// crash: appendonly, appendfsync when appendonly is on, and save (an empty
// save, no snapshots, is shown as two single quotes).
func redisDurability(ctx context.Context, rdb *redis.Client) (string, error) {
	conf := map[string]string{}
	for _, name := range []string{"appendonly", "appendfsync", "save"} {
		kv, err := rdb.ConfigGet(ctx, name).Result()
		if err != nil {
			return "", fmt.Errorf("bench: redis: config get %s: %w", name, err)
		}
		conf[name] = kv[name]
	}
	parts := []string{"appendonly " + conf["appendonly"]}
	if conf["appendonly"] == "yes" {
		parts = append(parts, "appendfsync "+conf["appendfsync"])
	}
	if conf["save"] == "" {
		conf["save"] = "''"
	}
	parts = append(parts, "save "+conf["save"])
	return strings.Join(parts, ", "), nil
}
