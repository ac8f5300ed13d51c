package replay_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/analytics/internal/fixture"
	"github.com/heraldhq/herald/analytics/replay"
	"github.com/heraldhq/herald/analytics/whatif"
	"github.com/heraldhq/herald/processors/dedupe"
	"github.com/heraldhq/herald/schemas"
)

func TestWhatIfOnAPipelineRun(t *testing.T) {
	f := fixture.Run(t)
	ctx := context.Background()
	policy := func(window time.Duration) whatif.Policy {
		return whatif.Policy{Dedupe: dedupe.Policy{DefaultWindowMs: window.Milliseconds(), IdempotencyTTLMs: fixture.Policy.IdempotencyTTLMs}}
	}
	run := func(t *testing.T, then, now whatif.Policy, from replay.From) *replay.WhatIfReport {
		t.Helper()
		rep, err := replay.WhatIf(ctx, replay.WhatIfOptions{Brokers: f.Brokers, Catalog: f.Catalog, ClickHouse: f.Conn, Database: f.DB,
			Then: then, Now: now, From: from, Samples: 1000})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	// between returns the request ids of the repeats (same tenant, type,
	// recipient and dedupe key or key-derived id, no idempotency key) that
	// came lo or more, and less than hi, after the first request of their
	// key: the fixture's requests, as produced.
	between := func(lo, hi time.Duration) []string {
		first := map[[4]string]int64{}
		var out []string
		for _, r := range f.Requests {
			k := [4]string{r.Tenant, r.Type, r.Recipient, "dedupe key " + r.DedupeKey}
			if r.DedupeKey == "" && r.IDSource == "key" {
				k[3] = "id " + r.NotificationID
			} else if r.DedupeKey == "" || r.IdempotencyKey != "" {
				continue
			}
			at, seen := first[k]
			if !seen {
				first[k] = r.CreatedAt
				continue
			}
			if gap := time.Duration(r.CreatedAt-at) * time.Millisecond; gap >= lo && gap < hi {
				out = append(out, r.RequestID)
			}
		}
		sort.Strings(out)
		return out
	}
	changed := func(rep *replay.WhatIfReport, then, now string) []string {
		var out []string
		for _, c := range rep.Samples {
			if c.Then.Dedupe == then && c.Now.Dedupe == now {
				out = append(out, c.RequestID)
			}
		}
		sort.Strings(out)
		return out
	}
	check := func(t *testing.T, rep *replay.WhatIfReport, then, now string, want []string) {
		t.Helper()
		if len(want) == 0 {
			t.Fatal("the fixture has no repeat in the range: the test would prove nothing")
		}
		if got := changed(rep, then, now); rep.Changed != len(want) || !slices.Equal(got, want) {
			t.Fatalf("%d changed, %s → %s: %v; want exactly %v", rep.Changed, then, now, got, want)
		}
	}

	t.Run("a window shortened from 10 min to 1 min reports exactly the duplicates between 1 and 10 minutes apart", func(t *testing.T) {
		rep := run(t, policy(10*time.Minute), policy(time.Minute), replay.From{Start: true})
		check(t, rep, schemas.DecisionDuplicate, schemas.DecisionAccepted, between(time.Minute, 10*time.Minute))
		if rep.Requests != len(f.Requests) || rep.Undecodable != f.Undecodable || rep.Warmup != 0 {
			t.Fatalf("%d requests (%d undecodable, %d warm-up), want %d (%d, 0)", rep.Requests, rep.Undecodable, rep.Warmup, len(f.Requests), f.Undecodable)
		}
		if len(between(0, time.Minute)) == 0 {
			t.Fatal("the fixture has no repeat under a minute apart: shortening could not be told from dropping every duplicate")
		}
		var b strings.Builder
		if err := rep.Print(&b); err != nil {
			t.Fatal(err)
		}
		t.Logf("the report:\n%s", b.String())
		for _, want := range []string{
			fmt.Sprintf("%d of %d request(s) would be decided differently.", len(between(time.Minute, 10*time.Minute)), len(f.Requests)),
			"promo.blast: 30 request(s), 10 changed; dedup hit rate 33.3% then, 0.0% now (recorded 33.3%)",
			"  10  duplicate → accepted, no_target: a repeat caught then would be let through now",
			"herald audit timeline --id",
		} {
			if !strings.Contains(b.String(), want) {
				t.Errorf("the report lacks %q", want)
			}
		}
	})

	t.Run("a window lengthened from 1 min to 10 min reports exactly the newly caught ones", func(t *testing.T) {
		rep := run(t, policy(time.Minute), policy(10*time.Minute), replay.From{Start: true})
		check(t, rep, schemas.DecisionAccepted, schemas.DecisionDuplicate, between(time.Minute, 10*time.Minute))
	})

	t.Run("against the live policy the record agrees with then, and 1 min lets through what was 1 min to 1 h apart", func(t *testing.T) {
		rep := run(t, policy(time.Hour), policy(time.Minute), replay.From{Start: true})
		check(t, rep, schemas.DecisionDuplicate, schemas.DecisionAccepted, between(time.Minute, time.Hour))
		if rep.Recorded != len(f.Requests) || rep.Mismatches != 0 {
			t.Fatalf("%d recorded outcomes, %d mismatches (%v); want %d and none", rep.Recorded, rep.Mismatches, rep.MismatchSamples, len(f.Requests))
		}
	})

	t.Run("a window that starts between originals and their repeats warms up and still reports them", func(t *testing.T) {
		want := between(time.Minute, 10*time.Minute)
		var at []int64
		for _, r := range f.Requests {
			if slices.Contains(want, r.RequestID) {
				at = append(at, r.CreatedAt)
			}
		}
		from := time.UnixMilli(slices.Min(at)).Add(-time.Minute)
		rep := run(t, policy(10*time.Minute), policy(time.Minute), replay.From{Time: from})
		check(t, rep, schemas.DecisionDuplicate, schemas.DecisionAccepted, want)
		if rep.Warmup == 0 || rep.Mismatches == 0 {
			// The record decided with a one hour window: the warm-up must
			// be read, and 10 min is not the live policy.
			t.Fatalf("warm-up %d, mismatches %d; want both", rep.Warmup, rep.Mismatches)
		}
	})
}
