package bench

import (
	"context"
	"fmt"
	"hash/fnv"
	"sync"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/schemas"
)

// scope is a request's dedupe scope id: the id of (tenant, type,
// recipient, dedupeKey), what every backend deduplicates on.
func scope(r schemas.Request) string {
	return identity.DedupeID(r.Tenant, r.Type, r.Recipient, r.DedupeKey)
}

// shard splits reqs into n sub-streams by dedupe scope, each in stream
// order, so that with several connections every repeat still follows its
// original on the same connection (as in a Kafka partition).
func shard(reqs []schemas.Request, n int) [][]schemas.Request {
	out := make([][]schemas.Request, n)
	for _, r := range reqs {
		h := fnv.New32a()
		h.Write([]byte(scope(r)))
		i := int(h.Sum32() % uint32(n))
		out[i] = append(out[i], r)
	}
	return out
}

// chunks calls f with consecutive pieces of reqs of at most size requests.
func chunks(reqs []schemas.Request, size int, f func([]schemas.Request) error) error {
	for len(reqs) > 0 {
		n := min(size, len(reqs))
		if err := f(reqs[:n]); err != nil {
			return err
		}
		reqs = reqs[n:]
	}
	return nil
}

// timed runs work for every shard at once, each on its own goroutine, and
// returns the summed accepted count and the span from the start of the
// first to the end of the last, measured by meter. Set-up (connecting)
// belongs before it.
func timed(ctx context.Context, meter cpuMeter, shards [][]schemas.Request, work func(ctx context.Context, i int, reqs []schemas.Request) (int, error)) (int, span, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	accepted := make([]int, len(shards))
	errs := make([]error, len(shards))
	start := meter.start()
	for i, reqs := range shards {
		wg.Go(func() {
			accepted[i], errs[i] = work(ctx, i, reqs)
			if errs[i] != nil {
				cancel()
			}
		})
	}
	wg.Wait()
	sp := meter.end(start)
	total := 0
	for i := range shards {
		if errs[i] != nil {
			return 0, sp, fmt.Errorf("connection %d: %w", i, errs[i])
		}
		total += accepted[i]
	}
	return total, sp, nil
}

// connsNote names the connection count when there is more than one.
func connsNote(conns int) string {
	if conns > 1 {
		return fmt.Sprintf(", %d conns", conns)
	}
	return ""
}
