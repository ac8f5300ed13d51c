package bench

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/processors/dedupe"
	"github.com/heraldhq/herald/schemas"
)

func generate(t *testing.T, o StreamOptions) *Stream {
	t.Helper()
	s, err := Generate(o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestGenerate(t *testing.T) {
	small := StreamOptions{Requests: 2000, RepeatRatio: 0.3, Seed: 7}
	t.Run("the same options give the same stream", func(t *testing.T) {
		a, b := generate(t, small), generate(t, small)
		if !reflect.DeepEqual(a, b) {
			t.Fatal("two streams from the same options differ")
		}
	})
	t.Run("another seed gives another stream", func(t *testing.T) {
		other := small
		other.Seed = 8
		a, b := generate(t, small), generate(t, other)
		if reflect.DeepEqual(a.Requests, b.Requests) {
			t.Fatal("seeds 7 and 8 give the same requests")
		}
	})
	t.Run("the default options give 100k requests with 30k repeats", func(t *testing.T) {
		s := generate(t, DefaultStreamOptions())
		if len(s.Requests) != 100_000 || s.Repeats() != 30_000 || s.Distinct != 70_000 {
			t.Fatalf("%d requests, %d repeats, %d distinct", len(s.Requests), s.Repeats(), s.Distinct)
		}
	})
}

func TestGenerateHonoursTheRepeatRatio(t *testing.T) {
	for _, tc := range []struct {
		name        string
		requests    int
		ratio       float64
		wantRepeats int
	}{
		{"a stream without repeats has only originals", 1000, 0, 0},
		{"30% of 1000 requests are 300 repeats", 1000, 0.3, 300},
		{"the repeat count is rounded to the nearest request", 999, 0.3, 300},
		{"half repeats are half the stream", 5000, 0.5, 2500},
		{"90% repeats repeat some originals more than once", 1000, 0.9, 900},
		{"one request is one original", 1, 0.3, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := generate(t, StreamOptions{Requests: tc.requests, RepeatRatio: tc.ratio, Seed: 1})
			ids := map[string]bool{}
			for _, r := range s.Requests {
				ids[r.NotificationID] = true
			}
			switch {
			case len(s.Requests) != tc.requests:
				t.Errorf("%d requests, want %d", len(s.Requests), tc.requests)
			case s.Repeats() != tc.wantRepeats:
				t.Errorf("%d repeats, want %d", s.Repeats(), tc.wantRepeats)
			case s.Distinct != tc.requests-tc.wantRepeats || len(ids) != s.Distinct:
				t.Errorf("Distinct %d, %d distinct notification ids; want %d", s.Distinct, len(ids), tc.requests-tc.wantRepeats)
			case s.Retries-s.SecondCalls < 0 || s.Retries-s.SecondCalls > 1:
				t.Errorf("%d retries and %d second calls: the kinds should alternate", s.Retries, s.SecondCalls)
			}
		})
	}
}

func TestGenerateRejectsImpossibleStreams(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    StreamOptions
	}{
		{"an empty stream is refused", StreamOptions{Requests: 0}},
		{"a repeat ratio of 1 leaves no originals", StreamOptions{Requests: 10, RepeatRatio: 1}},
		{"a negative repeat ratio is refused", StreamOptions{Requests: 10, RepeatRatio: -0.1}},
		{"a NaN repeat ratio is refused", StreamOptions{Requests: 10, RepeatRatio: math.NaN()}},
		{"a ratio that rounds every request to a repeat is refused", StreamOptions{Requests: 10, RepeatRatio: 0.96}},
		{"a negative step is refused", StreamOptions{Requests: 10, Step: -time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Generate(tc.o); err == nil {
				t.Fatal("no error")
			}
		})
	}
}

func TestTheStreamsSpanAndTimes(t *testing.T) {
	s := generate(t, StreamOptions{Requests: 20_000, RepeatRatio: 0.3, Seed: 5, MaxLag: 700, Step: 2 * time.Second})
	t.Run("Span is the furthest any repeat trails its original, in requests", func(t *testing.T) {
		first, span := map[string]int{}, 0
		for i, r := range s.Requests {
			if j, ok := first[r.NotificationID]; ok {
				span = max(span, i-j)
			} else {
				first[r.NotificationID] = i
			}
		}
		if s.Span != span || span < 700 {
			t.Fatalf("Span %d, the stream's furthest repeat %d requests after its original (at least the max lag of 700 originals)", s.Span, span)
		}
	})
	t.Run("with a step, the requests are stamped a step apart, the last at the end", func(t *testing.T) {
		end := time.UnixMilli(1_764_600_000_000)
		n := len(s.Requests)
		if got := s.Time(n-1, end); !got.Equal(end) {
			t.Fatalf("the last request at %v, want %v", got, end)
		}
		if got, want := s.Time(0, end), end.Add(-time.Duration(n-1)*2*time.Second); !got.Equal(want) {
			t.Fatalf("the first request at %v, want %v", got, want)
		}
		if d := s.Time(100, end).Sub(s.Time(99, end)); d != 2*time.Second {
			t.Fatalf("requests 99 and 100 %v apart, want 2s", d)
		}
	})
	t.Run("without a step, every request is stamped at the end", func(t *testing.T) {
		flat := generate(t, StreamOptions{Requests: 100, Seed: 5})
		end := time.Now()
		if !flat.Time(0, end).Equal(end) || !flat.Time(99, end).Equal(end) {
			t.Fatalf("requests at %v and %v, want both at %v", flat.Time(0, end), flat.Time(99, end), end)
		}
	})
	lag := time.Duration(s.Span) * 2 * time.Second
	for _, tc := range []struct {
		name        string
		window, ttl time.Duration
		ok          bool
	}{
		{"a window and a TTL just past the furthest lag decide as the stream says", lag + time.Millisecond, lag + time.Millisecond, true},
		{"a window of exactly the furthest lag is refused", lag, lag + time.Hour, false},
		{"a TTL of exactly the furthest lag is refused", lag + time.Hour, lag, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := dedupe.Policy{DefaultWindowMs: tc.window.Milliseconds(), IdempotencyTTLMs: tc.ttl.Milliseconds()}
			if err := s.CheckPolicy(p); (err == nil) != tc.ok {
				t.Fatalf("CheckPolicy: %v, want ok %v", err, tc.ok)
			}
		})
	}
}

// TestEveryRepeatFollowsItsOriginal: the original of dedupe key order-i is
// the request created at baseMs+i with idempotency key call-i-0, and it
// must be the first request of its notification; originals keep their
// order.
func TestEveryRepeatFollowsItsOriginal(t *testing.T) {
	for _, ratio := range []float64{0.3, 0.9} {
		t.Run(fmt.Sprintf("at %v repeats every notification starts with its original", ratio), func(t *testing.T) {
			s := generate(t, StreamOptions{Requests: 20_000, RepeatRatio: ratio, Seed: 3, MaxLag: 500})
			seen := map[string]bool{}
			last := -1
			for pos, r := range s.Requests {
				i, err := strconv.Atoi(strings.TrimPrefix(r.DedupeKey, "order-"))
				if err != nil {
					t.Fatalf("request %d: dedupe key %q", pos, r.DedupeKey)
				}
				original := r.CreatedAt == baseMs+int64(i) && r.IdempotencyKey == fmt.Sprintf("call-%d-0", i)
				switch {
				case !seen[r.NotificationID] && !original:
					t.Fatalf("request %d repeats order-%d before its original", pos, i)
				case seen[r.NotificationID] && original:
					t.Fatalf("request %d: order-%d has two originals", pos, i)
				case original && i != last+1:
					t.Fatalf("request %d: original order-%d after order-%d", pos, i, last)
				}
				if original {
					last = i
				}
				seen[r.NotificationID] = true
			}
		})
	}
}

// TestHeraldsDecisionsMatchTheStream feeds the stream through the dedupe
// stage's task (no Kafka) and counts its decisions: the outcomes the
// stream promises, so the full benchmark's check is the stage's own.
func TestHeraldsDecisionsMatchTheStream(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    StreamOptions
	}{
		{"30% repeats give 70% accepted, the rest replays and duplicates", StreamOptions{Requests: 4000, RepeatRatio: 0.3, Seed: 5}},
		{"repeats of repeats are still caught", StreamOptions{Requests: 2000, RepeatRatio: 0.8, Seed: 6, MaxLag: 50}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := generate(t, tc.o)
			tp := dedupe.Topics{Requests: "requests", Decisions: "decisions", Seen: "seen", Accepted: "accepted"}
			task := dedupe.NewTask(dedupe.DefaultPolicy(), tp, 0)
			start := time.UnixMilli(baseMs)
			got := map[string]int{}
			for i, r := range s.Requests {
				v, err := schemas.Encode(r)
				if err != nil {
					t.Fatal(err)
				}
				var out stage.Out
				rec := &kgo.Record{Topic: tp.Requests, Key: []byte(r.NotificationID), Value: v, Offset: int64(i), Timestamp: start.Add(time.Duration(i) * time.Millisecond)}
				if err := task.Process(rec, &out); err != nil {
					t.Fatal(err)
				}
				task.Commit()
				for _, o := range out.Records() {
					if o.Topic != tp.Decisions {
						continue
					}
					var d schemas.Decision
					if err := schemas.Decode(o.Value, &d); err != nil {
						t.Fatal(err)
					}
					got[d.Outcome]++
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(s.Outcomes()) {
				t.Fatalf("outcomes %v, want %v", got, s.Outcomes())
			}
		})
	}
}

func TestRunTask(t *testing.T) {
	s := generate(t, StreamOptions{Requests: 3000, RepeatRatio: 0.3, Seed: 9})
	for _, tc := range []struct {
		name       string
		partitions int32
		txn        int
		format     schemas.Format
	}{
		{"one partition committing after every request accepts the distinct notifications", 1, 1, schemas.FormatBinary},
		{"four partitions committing every 1000 requests accept the distinct notifications", 4, 1000, schemas.FormatBinary},
		{"four partitions reading and writing JSON records accept the distinct notifications", 4, 1000, schemas.FormatJSON},
	} {
		t.Run(tc.name, func(t *testing.T) {
			row, err := RunTask(s, dedupe.DefaultPolicy(), tc.partitions, tc.txn, tc.format)
			if err != nil {
				t.Fatal(err)
			}
			if err := CheckAccepted(s, []Row{row}); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(row.Note, "0.00 of them tombstones") {
				t.Fatalf("a stream stamped at one time tombstones keys: %s", row.Note)
			}
		})
	}
	t.Run("a stream a second apart, longer than the windows, is decided as it says while its keys expire", func(t *testing.T) {
		s := generate(t, StreamOptions{Requests: 3000, RepeatRatio: 0.3, Seed: 9, MaxLag: 50, Step: time.Second})
		p := dedupe.DefaultPolicy()
		p.DefaultWindowMs, p.IdempotencyTTLMs = 600_000, 600_000 // 10 minutes: past every repeat, within the 50-minute stream
		row, err := RunTask(s, p, 4, 1000, schemas.FormatBinary)
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckAccepted(s, []Row{row}); err != nil {
			t.Fatal(err)
		}
		// The stage tombstones a bucket record (herald.seen/v3) once all of
		// its keys expired: a few a transaction, not one a key.
		if tombstones := noteNumber(t, row.Note, " of them tombstones"); tombstones == 0 {
			t.Fatalf("%.2f tombstones a request, want expired buckets: %s", tombstones, row.Note)
		}
	})
	t.Run("a policy whose window ends before a repeat comes is refused", func(t *testing.T) {
		s := generate(t, StreamOptions{Requests: 3000, RepeatRatio: 0.3, Seed: 9, Step: time.Hour})
		if _, err := RunTask(s, dedupe.DefaultPolicy(), 4, 1000, schemas.FormatBinary); err == nil || !strings.Contains(err.Error(), "not within the dedupe window") {
			t.Fatalf("err %v, want the repeats' lag named", err)
		}
	})
}

// noteNumber is the number just before suffix in a row's note.
func noteNumber(t *testing.T, note, suffix string) float64 {
	t.Helper()
	before, _, ok := strings.Cut(note, suffix)
	if !ok {
		t.Fatalf("the note lacks %q: %s", suffix, note)
	}
	f, err := strconv.ParseFloat(before[strings.LastIndexByte(before, ' ')+1:], 64)
	if err != nil {
		t.Fatalf("the note's number before %q: %v", suffix, err)
	}
	return f
}
