package bench

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/processors/dedupe"
	"github.com/heraldhq/herald/schemas"
)

// StreamOptions shape the generated request stream.
type StreamOptions struct {
	// Requests is the stream's length.
	Requests int
	// RepeatRatio is the share of requests that repeat an earlier one, in
	// [0, 1): round(Requests × RepeatRatio) repeats, the rest originals.
	RepeatRatio float64
	// Seed makes the stream: the same options give the same stream.
	Seed uint64
	// MaxLag bounds how far a repeat trails its original: it comes after
	// 1 to MaxLag further originals. 3000 by default.
	MaxLag int
	// Recipients is the number of distinct recipients, 5000 by default.
	Recipients int
	// Step is the stream time from one request to the next. Zero (the
	// default) stamps every record with the time it is produced: a run
	// lasts seconds, the stage's windows an hour, and nothing expires in
	// it, so every run measures a seen-set that only grows. A positive
	// step stamps the requests Step apart in the past, the last one at
	// the time the stream is produced (see Time): 200,000 requests a
	// second apart span 55 hours, and the stage expires and tombstones
	// its keys as a stage that has run for days does. The dedupe window
	// and the idempotency TTL must then outlast Span × Step (see
	// CheckPolicy), or the decisions would differ from the stream's.
	Step time.Duration
}

// DefaultStreamOptions: 100k requests, 30% repeats, seed 1.
func DefaultStreamOptions() StreamOptions {
	return StreamOptions{Requests: 100_000, RepeatRatio: 0.3, Seed: 1, MaxLag: 3000, Recipients: 5000}
}

// Stream is a generated request stream and what deciding it must give.
//
// Every request carries a dedupe key (so its notification id is the dedupe
// scope's id) and an idempotency key. An original is a new notification. A
// repeat is one of two kinds, alternating: an exact retry (same idempotency
// key and body, another request id), which herald answers with an
// idempotent_replay, or a second call from another code path (same dedupe
// key, a fresh idempotency key, another title), a duplicate. Either way the
// repeat shares its original's dedupe scope and comes later in the stream,
// so every backend must accept exactly the originals.
type Stream struct {
	Options  StreamOptions
	Requests []schemas.Request
	// Distinct is the number of distinct notifications (dedupe scopes):
	// the accepted count every backend must report.
	Distinct int
	// Retries and SecondCalls are the repeats of each kind.
	Retries, SecondCalls int
	// Span is the furthest a repeat trails its original, in requests:
	// the repeat is request i + Span when the original is request i.
	Span int
}

// Repeats is the number of requests that repeat an earlier one.
func (s *Stream) Repeats() int { return s.Retries + s.SecondCalls }

// Outcomes is the count of each dedupe decision herald must make, provided
// every repeat falls inside its original's dedupe window and idempotency
// TTL (see CheckPolicy).
func (s *Stream) Outcomes() map[string]int {
	out := map[string]int{schemas.DecisionAccepted: s.Distinct}
	if s.Retries > 0 {
		out[schemas.DecisionIdempotentReplay] = s.Retries
	}
	if s.SecondCalls > 0 {
		out[schemas.DecisionDuplicate] = s.SecondCalls
	}
	return out
}

// String describes the stream in one line.
func (s *Stream) String() string {
	return fmt.Sprintf("%d requests, %d repeats (%.1f%%: %d retries, %d second calls), %d distinct notifications, seed %d",
		len(s.Requests), s.Repeats(), 100*float64(s.Repeats())/float64(max(len(s.Requests), 1)),
		s.Retries, s.SecondCalls, s.Distinct, s.Options.Seed)
}

// baseMs is the CreatedAt of the first original (content only: record
// times are set when the stream is produced).
const baseMs = 1_764_500_000_000

// Generate builds the stream. It depends on nothing but o.
func Generate(o StreamOptions) (*Stream, error) {
	d := DefaultStreamOptions()
	if o.MaxLag == 0 {
		o.MaxLag = d.MaxLag
	}
	if o.Recipients == 0 {
		o.Recipients = d.Recipients
	}
	switch {
	case o.Requests < 1:
		return nil, fmt.Errorf("bench: stream: requests must be at least 1, got %d", o.Requests)
	case math.IsNaN(o.RepeatRatio) || o.RepeatRatio < 0 || o.RepeatRatio >= 1:
		return nil, fmt.Errorf("bench: stream: repeat ratio must be in [0, 1), got %v", o.RepeatRatio)
	case o.MaxLag < 1 || o.Recipients < 1:
		return nil, errors.New("bench: stream: max lag and recipients must be positive")
	case o.Step < 0:
		return nil, fmt.Errorf("bench: stream: step must not be negative, got %v", o.Step)
	}
	repeats := int(math.Round(float64(o.Requests) * o.RepeatRatio))
	originals := o.Requests - repeats
	if originals < 1 {
		return nil, fmt.Errorf("bench: stream: %d requests at repeat ratio %v leave no originals", o.Requests, o.RepeatRatio)
	}

	rng := rand.New(rand.NewPCG(o.Seed, 0x6865_7261_6c64)) // "herald"
	id := func() string { return fmt.Sprintf("%016x%016x", rng.Uint64(), rng.Uint64()) }
	orig := make([]schemas.Request, originals)
	for i := range orig {
		r := schemas.Request{
			RequestID:      id(),
			Tenant:         "acme",
			Type:           "order.shipped",
			Recipient:      fmt.Sprintf("u_%d", rng.IntN(o.Recipients)),
			IDSource:       "dedupe_key",
			DedupeKey:      fmt.Sprintf("order-%d", i),
			IdempotencyKey: fmt.Sprintf("call-%d-0", i),
			Title:          "Your order has shipped",
			Body:           fmt.Sprintf("Order %d is on its way and should arrive within three working days.", i),
			Payload:        []byte(fmt.Sprintf(`{"order":"order-%d","carrier":"dhl"}`, i)),
			Locale:         "en",
			Producer:       "bench",
			Source:         "api",
			CreatedAt:      baseMs + int64(i),
		}
		r.NotificationID = identity.DedupeID(r.Tenant, r.Type, r.Recipient, r.DedupeKey)
		orig[i] = r
	}

	// later[k] holds the repeats that go just before original k (or at the
	// end, for k ≥ originals): always after their own original.
	type repeat struct {
		of int // the original's index in orig
		r  schemas.Request
	}
	later := make([][]repeat, originals+o.MaxLag+1)
	s := &Stream{Options: o, Distinct: originals}
	for n := range repeats {
		j := rng.IntN(originals)
		r := orig[j]
		r.RequestID = id()
		r.CreatedAt = orig[j].CreatedAt + 1 + int64(n)
		if n%2 == 0 {
			s.Retries++
		} else {
			s.SecondCalls++
			r.IdempotencyKey = fmt.Sprintf("call-%d-%d", j, n+1)
			r.Title = "Shipped (from the warehouse system)"
		}
		at := j + 1 + rng.IntN(o.MaxLag)
		later[at] = append(later[at], repeat{j, r})
	}
	s.Requests = make([]schemas.Request, 0, o.Requests)
	pos := make([]int, originals) // where each original is in the stream
	for k := range later {
		for _, rp := range later[k] {
			s.Span = max(s.Span, len(s.Requests)-pos[rp.of])
			s.Requests = append(s.Requests, rp.r)
		}
		if k < originals {
			pos[k] = len(s.Requests)
			s.Requests = append(s.Requests, orig[k])
		}
	}
	return s, nil
}

// Time is the record time of request i when the stream is produced at
// end: end itself without a Step, else Step apart, the last request at
// end.
func (s *Stream) Time(i int, end time.Time) time.Time {
	return end.Add(-time.Duration(len(s.Requests)-1-i) * s.Options.Step)
}

// CheckPolicy reports an error when p would decide the stream otherwise
// than Outcomes says: when a repeat could come Span × Step or more after
// its original, at or past the dedupe window or the idempotency TTL
// (p's defaults; the stream sets neither per request).
func (s *Stream) CheckPolicy(p dedupe.Policy) error {
	lag := time.Duration(s.Span) * s.Options.Step
	if window, ttl := time.Duration(p.DefaultWindowMs)*time.Millisecond, time.Duration(p.IdempotencyTTLMs)*time.Millisecond; lag >= window || lag >= ttl {
		return fmt.Errorf("bench: stream: a repeat comes up to %d requests (%v at a step of %v) after its original, not within the dedupe window (%v) and the idempotency TTL (%v): lengthen both or shorten the step",
			s.Span, lag, s.Options.Step, window, ttl)
	}
	return nil
}
