package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/schemas"
)

func TestCheckAccepted(t *testing.T) {
	s := &Stream{Requests: make([]schemas.Request, 10), Distinct: 7}
	for _, tc := range []struct {
		name    string
		rows    []Row
		wantErr string
	}{
		{"backends that all accept the distinct notifications agree", []Row{
			{Backend: "a", Records: 10, Accepted: 7, Decisions: 10},
			{Backend: "b", Records: 10, Accepted: 7, Decisions: 10},
		}, ""},
		{"a setup row takes no part in the check", []Row{
			{Backend: "a", Records: 10, Accepted: -1, Decisions: -1},
			{Backend: "b", Records: 10, Accepted: 7, Decisions: 10},
		}, ""},
		{"a backend that accepts a repeat is named", []Row{
			{Backend: "a", Records: 10, Accepted: 7, Decisions: 10},
			{Backend: "b", Variant: "v", Records: 10, Accepted: 8, Decisions: 10},
		}, "b (v) accepted 8 of 10"},
		{"a backend that loses decisions is named", []Row{
			{Backend: "c", Records: 10, Accepted: 7, Decisions: 9},
		}, "c () accepted 7 of 10 requests with 9 decisions"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckAccepted(s, tc.rows)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestRunNeedsABackend(t *testing.T) {
	if _, err := Run(context.Background(), Config{Stream: DefaultStreamOptions()}); err == nil {
		t.Fatal("Run without backends did not fail")
	}
}

func TestShard(t *testing.T) {
	s, err := Generate(StreamOptions{Requests: 3000, RepeatRatio: 0.3, Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("with %d connections every scope stays on one, in stream order", n), func(t *testing.T) {
			shards := shard(s.Requests, n)
			owner := map[string]int{}
			total := 0
			for i, reqs := range shards {
				total += len(reqs)
				for _, r := range reqs {
					if o, ok := owner[r.NotificationID]; ok && o != i {
						t.Fatalf("notification %s on connections %d and %d", r.NotificationID, o, i)
					}
					owner[r.NotificationID] = i
				}
			}
			if total != len(s.Requests) {
				t.Fatalf("%d requests in %d shards, want %d", total, n, len(s.Requests))
			}
			// Stream order within a shard: CreatedAt of a scope's requests
			// rises along the shard, as in the stream.
			for _, reqs := range shards {
				first := map[string]int64{}
				for _, r := range reqs {
					if at, ok := first[r.NotificationID]; ok && r.CreatedAt < at {
						t.Fatalf("notification %s: a request created before its original follows it", r.NotificationID)
					}
					if _, ok := first[r.NotificationID]; !ok {
						first[r.NotificationID] = r.CreatedAt
					}
				}
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	row := func(backend string, seconds float64, note string) Row {
		return Row{Backend: backend, Variant: "v", Records: 1000, Accepted: 700, Decisions: 1000, Elapsed: time.Duration(seconds * float64(time.Second)), Note: note}
	}
	for _, tc := range []struct {
		name   string
		rounds [][]Row
		want   []Row
	}{
		{"one round's rows are returned as they are",
			[][]Row{{row("a", 1, "x"), row("b", 2, "y")}},
			[]Row{row("a", 1, "x"), row("b", 2, "y")}},
		{"of three rounds each measurement is its median round, with the range of all three",
			[][]Row{{row("a", 1, "r1"), row("b", 4, "r1")}, {row("a", 2, "r2"), row("b", 5, "r2")}, {row("a", 4, "r3"), row("b", 2, "r3")}},
			[]Row{row("a", 2, "median of 3 rounds, 250–1000 records/s; r2"), row("b", 4, "median of 3 rounds, 200–500 records/s; r1")}},
		{"of two rounds the slower one is reported",
			[][]Row{{row("a", 1, "fast")}, {row("a", 2, "slow")}},
			[]Row{row("a", 2, "median of 2 rounds, 500–1000 records/s; slow")}},
		{"a measurement a failed round did not reach keeps the rounds that made it",
			[][]Row{{row("a", 1, "r1"), row("b", 1, "r1")}, {row("a", 3, "r2")}},
			[]Row{row("a", 3, "median of 2 rounds, 333–1000 records/s; r2"), row("b", 1, "r1")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Summarize(tc.rounds)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("Summarize:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}
