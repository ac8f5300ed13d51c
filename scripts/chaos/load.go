package main

import (
	"context"
	"fmt"
	"math/rand/v2"
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
// once; a tick that finds them all busy is counted as skipped).
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
}

const maxInFlight = 1024

// run sends until ctx ends and waits for the sends in flight.
func (l *load) run(ctx context.Context, stop <-chan struct{}) {
	tick := time.NewTicker(time.Duration(float64(time.Second) / l.rate))
	defer tick.Stop()
	sem := make(chan struct{}, maxInFlight)
	var wg sync.WaitGroup
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
		n++
		notif, repeatOf := l.next(n)
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
	res, err := l.client.Send(ctx, n)
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
