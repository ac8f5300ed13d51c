package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldhq/herald/sdk"
)

// device is one registered device of a recipient.
type device struct {
	recipient, id, platform, token string
}

// load is the open-model load generator: sends at a fixed rate, whatever
// the answers take, each in its own goroutine (at most maxInFlight at
// once; a send due when they are all busy is counted as skipped).
type load struct {
	client     *sdk.Client
	rate       float64
	recipients []string
	devices    []device
	rng        *rand.Rand // used by the ticking goroutine only

	mu sync.Mutex
	// acked maps each notification id a 202 named to how many 202s
	// named it.
	acked map[string]int
	// sent remembers earlier sends, to repeat them (same idempotency key)
	// or reuse their dedupe key.
	sent []sdk.Notification

	sends, answered, failed, skipped, repeats, dedupeRepeats, multi, deviceTargets atomic.Int64
	replayMismatch                                                                 atomic.Int64
	errs                                                                           []string
	// latencies of the sends answered 202 (first try to the 202, the
	// client's retries included), for the percentiles printed.
	latencies []time.Duration
}

const maxInFlight = 4096

// run sends until ctx ends and waits for the sends in flight. It wakes
// every 10 ms and starts every send due by then (rate × the time since
// the start): a wake-up delayed by a busy machine starts the sends it
// missed at once, where a ticker would drop its ticks and offer less than
// the rate asked.
func (l *load) run(ctx context.Context, stop <-chan struct{}) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	sem := make(chan struct{}, maxInFlight)
	var wg sync.WaitGroup
	start := time.Now()
	n := 0
	for {
		select {
		case <-stop:
			wg.Wait()
			return
		case <-ctx.Done():
			wg.Wait()
			return
		case <-tick.C:
		}
		due := int(time.Since(start).Seconds() * l.rate)
		for ; n < due; n++ {
			notif, repeatOf := l.next(n + 1)
			select {
			case sem <- struct{}{}:
			default:
				l.skipped.Add(1)
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				l.send(ctx, notif, repeatOf)
			}()
		}
	}
}

// next makes the n-th send: a repeat of an earlier one (same idempotency
// key: a client retry), a new send reusing an earlier dedupe key, a
// device-targeted send, or a new send to one to three recipients.
func (l *load) next(n int) (sdk.Notification, *sdk.Notification) {
	l.mu.Lock()
	prev := len(l.sent)
	l.mu.Unlock()
	p := l.rng.Float64()
	if prev > 10 && p < 0.10 {
		l.mu.Lock()
		orig := l.sent[prev-1-l.rng.IntN(min(prev, 200))]
		l.mu.Unlock()
		return orig, &orig
	}
	if prev > 10 && p < 0.20 {
		l.mu.Lock()
		orig := l.sent[prev-1-l.rng.IntN(min(prev, 200))]
		l.mu.Unlock()
		if orig.DedupeKey != "" && orig.Target == nil {
			rep := orig
			rep.IdempotencyKey = fmt.Sprintf("chaos-%d", n)
			l.dedupeRepeats.Add(1)
			return rep, nil
		}
	}
	notif := sdk.Notification{Type: "chaos.event", Title: "Chaos", Body: fmt.Sprintf("send %d", n),
		IdempotencyKey: fmt.Sprintf("chaos-%d", n), DedupeKey: fmt.Sprintf("event-%d", n)}
	switch {
	case p < 0.25:
		d := l.devices[l.rng.IntN(len(l.devices))]
		notif.Target = &sdk.Target{Kind: sdk.TargetDevice, UserID: d.recipient, DeviceID: d.id}
		notif.DedupeKey = ""
		l.deviceTargets.Add(1)
	case p < 0.45:
		k := 2 + l.rng.IntN(2)
		seen := map[string]bool{}
		for len(notif.Recipients) < k {
			r := l.recipients[l.rng.IntN(len(l.recipients))]
			if !seen[r] {
				seen[r] = true
				notif.Recipients = append(notif.Recipients, r)
			}
		}
		l.multi.Add(1)
	default:
		notif.Recipients = []string{l.recipients[l.rng.IntN(len(l.recipients))]}
	}
	return notif, nil
}

func (l *load) send(ctx context.Context, n sdk.Notification, repeatOf *sdk.Notification) {
	l.sends.Add(1)
	if repeatOf != nil {
		l.repeats.Add(1)
	}
	began := time.Now()
	res, err := l.client.Send(ctx, n)
	took := time.Since(began)
	if err != nil {
		l.failed.Add(1)
		l.mu.Lock()
		if len(l.errs) < 20 {
			l.errs = append(l.errs, err.Error())
		}
		l.mu.Unlock()
		return
	}
	l.answered.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.latencies = append(l.latencies, took)
	for _, s := range res.Notifications {
		l.acked[s.ID]++
	}
	if repeatOf == nil {
		l.sent = append(l.sent, n)
	}
}

// ackedIDs is a copy of the notification ids some 202 named.
func (l *load) ackedIDs() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]int, len(l.acked))
	for id, n := range l.acked {
		out[id] = n
	}
	return out
}

// percentiles of the answered sends' latencies: p50, p99 and the most.
func (l *load) percentiles() (p50, p99, most time.Duration) {
	l.mu.Lock()
	ds := append([]time.Duration(nil), l.latencies...)
	l.mu.Unlock()
	if len(ds) == 0 {
		return 0, 0, 0
	}
	slices.Sort(ds)
	return ds[len(ds)/2], ds[len(ds)*99/100], ds[len(ds)-1]
}
