package queries_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/analytics/internal/fixture"
	"github.com/heraldhq/herald/analytics/queries"
	"github.com/heraldhq/herald/schemas"
)

func TestEveryQueryDocumentsItselfAndItsParameters(t *testing.T) {
	all, err := queries.All()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"ambiguous_timeout_rate", "attempts_by_channel", "decisions_by_reason", "high_hit_rate_types", "hit_rate_by_type_7d",
		"hit_rate_hourly", "hit_rate_spikes", "maybe_shown_twice", "near_retry_limit", "outcomes_by_channel", "receipts_by_type",
		"suppressed_for_recipient", "zero_hit_rate_types"}
	var names []string
	for _, q := range all {
		names = append(names, q.Name)
		t.Run(q.Name+" says what it answers and names every parameter", func(t *testing.T) {
			if len(q.Doc) < 80 {
				t.Errorf("doc too short: %q", q.Doc)
			}
			if len(q.Params) == 0 {
				t.Error("no parameters")
			}
			for _, p := range q.Params {
				if !strings.Contains(q.Doc, p.Name) {
					t.Errorf("doc does not mention parameter %s", p.Name)
				}
			}
		})
	}
	if !slices.Equal(names, want) {
		t.Fatalf("queries %v, want %v", names, want)
	}
	if _, err := queries.Get("no_such_query"); err == nil {
		t.Error("Get of an unknown name succeeded")
	}
}

// hm counts dedup hits and misses.
type hm struct{ hits, misses uint64 }

func (c hm) rate() float64 { return float64(c.hits) / float64(c.hits+c.misses) }

// hitsByType counts the dedupe stage's hits and misses per tenant/type for
// decisions in [from, to).
func hitsByType(f *fixture.Fixture, from, to time.Time) map[string]hm {
	out := map[string]hm{}
	for _, d := range f.Decisions {
		at := time.UnixMilli(d.At)
		if d.Stage != "dedupe" || at.Before(from) || !at.Before(to) {
			continue
		}
		k := d.Tenant + "/" + d.Type
		c := out[k]
		switch d.Outcome {
		case schemas.DecisionDuplicate, schemas.DecisionIdempotentReplay:
			c.hits++
		case schemas.DecisionAccepted:
			c.misses++
		default:
			continue
		}
		out[k] = c
	}
	return out
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func TestQueriesOnAPipelineRun(t *testing.T) {
	f := fixture.Run(t)
	ctx := context.Background()
	until := f.Until
	run := func(t *testing.T, name string, dest any, params map[string]string) {
		t.Helper()
		q, err := queries.Get(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Select(ctx, f.Conn, dest, params); err != nil {
			t.Fatal(err)
		}
	}
	week := hitsByType(f, until.Add(-7*24*time.Hour), until)

	// hitRateRow is a row of hit_rate_by_type_7d.
	type hitRateRow struct {
		Tenant      string  `ch:"tenant"`
		Type        string  `ch:"type"`
		Hits        uint64  `ch:"hits"`
		Misses      uint64  `ch:"misses"`
		HitRate     float64 `ch:"hit_rate"`
		ClientDrops uint64  `ch:"client_drops"`
		WithClient  float64 `ch:"hit_rate_with_client_drops"`
	}
	t.Run("hit rate per type over 7 days matches the decisions", func(t *testing.T) {
		var rows []hitRateRow
		run(t, "hit_rate_by_type_7d", &rows, map[string]string{"until": queries.Time(until)})
		got := map[string]hm{}
		for _, r := range rows {
			got[r.Tenant+"/"+r.Type] = hm{r.Hits, r.Misses}
			if w := (hm{r.Hits, r.Misses}); math.Abs(r.HitRate-w.rate()) > 1e-12 {
				t.Errorf("%s/%s: hit rate %v, want %v", r.Tenant, r.Type, r.HitRate, w.rate())
			}
		}
		want := map[string]hm{}
		for k, c := range week {
			if c.hits+c.misses > 0 {
				want[k] = c
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("query %v\ndecisions %v", got, want)
		}
	})

	t.Run("client-side drops count each dropped receipt once, however often it was sent", func(t *testing.T) {
		var rows []hitRateRow
		run(t, "hit_rate_by_type_7d", &rows, map[string]string{"until": queries.Time(until.Add(time.Hour))})
		got := map[string]uint64{}
		for _, r := range rows {
			if r.ClientDrops > 0 {
				got[r.Tenant+"/"+r.Type] = r.ClientDrops
			}
			if w := float64(r.Hits+r.ClientDrops) / float64(r.Hits+r.ClientDrops+r.Misses); math.Abs(r.WithClient-w) > 1e-12 {
				t.Errorf("%s/%s: rate with client drops %v, want %v", r.Tenant, r.Type, r.WithClient, w)
			}
		}
		want := map[string]uint64{}
		ids := map[string]int{}
		sentTwice := 0
		for _, rc := range f.Receipts {
			if rc.Kind != schemas.ReceiptDropped {
				continue
			}
			if ids[rc.ReceiptID]++; ids[rc.ReceiptID] == 1 {
				want[rc.Tenant+"/"+rc.Type]++
			} else {
				sentTwice++
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) || len(want) == 0 || sentTwice == 0 {
			t.Fatalf("query %v\nreceipts %v (want some, %d of them sent twice)", got, want, sentTwice)
		}
	})

	t.Run("receipts per type count each receipt once, however often it was sent", func(t *testing.T) {
		var rows []struct {
			Tenant    string   `ch:"tenant"`
			Type      string   `ch:"type"`
			Displayed uint64   `ch:"displayed"`
			Opened    uint64   `ch:"opened"`
			Dropped   uint64   `ch:"dropped"`
			OpenRate  *float64 `ch:"open_rate"`
		}
		run(t, "receipts_by_type", &rows, map[string]string{"since": queries.Time(until.Add(-49 * time.Hour)), "until": queries.Time(until.Add(time.Hour))})
		got := map[string][3]uint64{}
		for _, r := range rows {
			got[r.Tenant+"/"+r.Type] = [3]uint64{r.Displayed, r.Opened, r.Dropped}
			if r.OpenRate == nil || math.Abs(*r.OpenRate-float64(r.Opened)/float64(r.Displayed)) > 1e-12 {
				t.Errorf("%s/%s: open rate %v for %d of %d", r.Tenant, r.Type, r.OpenRate, r.Opened, r.Displayed)
			}
		}
		want := map[string][3]uint64{}
		seen := map[string]bool{}
		for _, rc := range f.Receipts {
			if seen[rc.ReceiptID] {
				continue
			}
			seen[rc.ReceiptID] = true
			c := want[rc.Tenant+"/"+rc.Type]
			c[map[string]int{schemas.ReceiptDisplayed: 0, schemas.ReceiptOpened: 1, schemas.ReceiptDropped: 2}[rc.Kind]]++
			want[rc.Tenant+"/"+rc.Type] = c
		}
		if fmt.Sprint(got) != fmt.Sprint(want) || len(seen) == len(f.Receipts) {
			t.Fatalf("query %v\nreceipts %v (want some sent twice: %d ids of %d receipts)", got, want, len(seen), len(f.Receipts))
		}
	})

	t.Run("types with a 0% hit rate are the ones whose producer sends random ids", func(t *testing.T) {
		var rows []struct {
			Tenant    string `ch:"tenant"`
			Type      string `ch:"type"`
			Accepted  uint64 `ch:"accepted"`
			IDSources string `ch:"idsources"`
		}
		run(t, "zero_hit_rate_types", &rows, map[string]string{"until": queries.Time(until), "min_decisions": "10"})
		var got, want []string
		for _, r := range rows {
			got = append(got, fmt.Sprintf("%s/%s %d %s", r.Tenant, r.Type, r.Accepted, r.IDSources))
		}
		for _, k := range keys(week) {
			if c := week[k]; c.hits == 0 && c.misses >= 10 {
				want = append(want, fmt.Sprintf("%s %d random", k, c.misses))
			}
		}
		if !slices.Equal(got, want) || len(want) != 1 || !strings.HasPrefix(want[0], "acme/chat.message ") {
			t.Fatalf("query %q, decisions %q (want only acme/chat.message)", got, want)
		}
	})

	t.Run("types above a 50% hit rate are the ones sent three times", func(t *testing.T) {
		var rows []struct {
			Tenant  string  `ch:"tenant"`
			Type    string  `ch:"type"`
			Hits    uint64  `ch:"hits"`
			Misses  uint64  `ch:"misses"`
			HitRate float64 `ch:"hit_rate"`
		}
		run(t, "high_hit_rate_types", &rows, map[string]string{"until": queries.Time(until), "min_decisions": "10"})
		var got, want []string
		for _, r := range rows {
			got = append(got, r.Tenant+"/"+r.Type)
		}
		for _, k := range keys(week) {
			if c := week[k]; c.hits+c.misses >= 10 && c.rate() > 0.5 {
				want = append(want, k)
			}
		}
		if !slices.Equal(got, want) || !slices.Equal(want, []string{"acme/invoice.paid"}) {
			t.Fatalf("query %v, decisions %v (want acme/invoice.paid)", got, want)
		}
	})

	t.Run("a spike against the previous day is found", func(t *testing.T) {
		var rows []struct {
			Tenant         string  `ch:"tenant"`
			Type           string  `ch:"type"`
			PreviousHits   uint64  `ch:"previous_hits"`
			PreviousMisses uint64  `ch:"previous_misses"`
			PreviousRate   float64 `ch:"previous_rate"`
			CurrentHits    uint64  `ch:"current_hits"`
			CurrentMisses  uint64  `ch:"current_misses"`
			CurrentRate    float64 `ch:"current_rate"`
			Increase       float64 `ch:"increase"`
		}
		run(t, "hit_rate_spikes", &rows, map[string]string{"until": queries.Time(until), "period_hours": "24",
			"min_decisions": "5", "min_increase": "0.2"})
		prev := hitsByType(f, until.Add(-48*time.Hour), until.Add(-24*time.Hour))
		cur := hitsByType(f, until.Add(-24*time.Hour), until)
		var got, want []string
		for _, r := range rows {
			got = append(got, fmt.Sprintf("%s/%s %.4f->%.4f", r.Tenant, r.Type, r.PreviousRate, r.CurrentRate))
		}
		for _, k := range keys(cur) {
			p, c := prev[k], cur[k]
			if p.hits+p.misses >= 5 && c.hits+c.misses >= 5 && c.rate()-p.rate() >= 0.2 {
				want = append(want, fmt.Sprintf("%s %.4f->%.4f", k, p.rate(), c.rate()))
			}
		}
		if !slices.Equal(got, want) || len(want) != 1 || !strings.HasPrefix(want[0], "globex/promo.blast ") {
			t.Fatalf("query %q, decisions %q (want only globex/promo.blast)", got, want)
		}
	})

	t.Run("the missing-notification report lists every suppressed send of the recipient", func(t *testing.T) {
		var rows []struct {
			At                time.Time `ch:"at"`
			Kind              string    `ch:"kind"`
			NotificationID    string    `ch:"notification_id"`
			RequestID         string    `ch:"request_id"`
			DeliveryID        string    `ch:"delivery_id"`
			Channel           string    `ch:"channel"`
			Reason            string    `ch:"reason"`
			Detail            string    `ch:"detail"`
			OriginalRequestID string    `ch:"original_request_id"`
		}
		run(t, "suppressed_for_recipient", &rows, map[string]string{"tenant": "acme", "recipient": "u_audit",
			"since": queries.Time(until.Add(-49 * time.Hour)), "until": queries.Time(until.Add(time.Hour))})
		var got, want []string
		for _, r := range rows {
			got = append(got, r.Kind+" "+r.NotificationID+" "+r.RequestID+r.DeliveryID+" "+r.Reason)
		}
		for _, d := range f.Decisions {
			if d.Tenant == "acme" && d.Recipient == "u_audit" && d.Outcome != schemas.DecisionAccepted {
				want = append(want, "decision "+d.NotificationID+" "+d.RequestID+" "+d.Outcome)
			}
		}
		for _, o := range f.Outcomes {
			if o.Tenant == "acme" && o.Recipient == "u_audit" && o.Status != schemas.OutcomeDelivered {
				want = append(want, "delivery "+o.NotificationID+" "+o.DeliveryID+" "+o.Status)
			}
		}
		sort.Strings(got)
		sort.Strings(want)
		var duplicates, rejected int
		for _, w := range want {
			duplicates += strings.Count(w, " duplicate")
			rejected += strings.Count(w, " rejected")
		}
		if !slices.Equal(got, want) || duplicates == 0 || rejected == 0 {
			t.Fatalf("query %q\nrecords %q (want duplicates and rejections among them)", got, want)
		}
	})

	t.Run("the ambiguous-timeout rate per channel matches the attempts", func(t *testing.T) {
		var rows []struct {
			Tenant   string  `ch:"tenant"`
			Channel  string  `ch:"channel"`
			Amb      uint64  `ch:"ambiguous"`
			Attempts uint64  `ch:"attempts"`
			Rate     float64 `ch:"ambiguous_rate"`
		}
		run(t, "ambiguous_timeout_rate", &rows, map[string]string{"since": queries.Time(until.Add(-49 * time.Hour)),
			"until": queries.Time(until.Add(time.Hour))})
		type ac struct{ amb, all uint64 }
		want := map[string]ac{}
		for _, a := range f.Attempts {
			c := want[a.Tenant+"/"+a.Channel]
			c.all++
			if a.Result == schemas.AttemptAmbiguous {
				c.amb++
			}
			want[a.Tenant+"/"+a.Channel] = c
		}
		got := map[string]ac{}
		var amb uint64
		for _, r := range rows {
			got[r.Tenant+"/"+r.Channel] = ac{r.Amb, r.Attempts}
			amb += r.Amb
			if math.Abs(r.Rate-float64(r.Amb)/float64(r.Attempts)) > 1e-12 {
				t.Errorf("%s/%s: rate %v for %d/%d", r.Tenant, r.Channel, r.Rate, r.Amb, r.Attempts)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) || amb == 0 {
			t.Fatalf("query %v, attempts %v (want some ambiguous)", got, want)
		}
	})

	t.Run("deliveries that may have been shown twice are exactly those with two attempts that may have reached the device", func(t *testing.T) {
		var rows []struct {
			Tenant            string    `ch:"tenant"`
			Channel           string    `ch:"channel"`
			DeliveryID        string    `ch:"delivery_id"`
			NotificationID    string    `ch:"notification_id"`
			Recipient         string    `ch:"recipient"`
			DeviceID          string    `ch:"device_id"`
			CollapseID        string    `ch:"collapse_id"`
			APNsID            string    `ch:"apns_id"`
			AmbiguousAttempts uint32    `ch:"ambiguous_attempts"`
			PossibleCopies    uint32    `ch:"possible_copies"`
			FirstAt           time.Time `ch:"first_at"`
			LastAt            time.Time `ch:"last_at"`
		}
		run(t, "maybe_shown_twice", &rows, map[string]string{"since": queries.Time(until.Add(-49 * time.Hour)), "until": queries.Time(until.Add(time.Hour))})
		type tally struct{ ambiguous, copies int }
		per := map[string]tally{}
		for _, a := range f.Attempts {
			x := per[a.DeliveryID]
			if a.Result == schemas.AttemptAmbiguous {
				x.ambiguous++
			}
			if a.Result == schemas.AttemptAmbiguous || a.Result == schemas.AttemptSent {
				x.copies++
			}
			per[a.DeliveryID] = x
		}
		var got, want []string
		for _, r := range rows {
			got = append(got, fmt.Sprintf("%s %d %d", r.DeliveryID, r.AmbiguousAttempts, r.PossibleCopies))
		}
		withAmbiguous := 0
		for id, x := range per {
			if x.copies >= 2 {
				want = append(want, fmt.Sprintf("%s %d %d", id, x.ambiguous, x.copies))
				if x.ambiguous > 0 {
					withAmbiguous++
				}
			}
		}
		sort.Strings(got)
		sort.Strings(want)
		if !slices.Equal(got, want) || withAmbiguous == 0 || withAmbiguous == len(want) {
			t.Fatalf("query %q\nattempts %q (want both kinds: after an ambiguous attempt, and delivered twice)", got, want)
		}
	})

	t.Run("jobs one attempt from their retry limit are listed", func(t *testing.T) {
		var rows []struct {
			Tenant         string    `ch:"tenant"`
			Type           string    `ch:"type"`
			DeliveryID     string    `ch:"delivery_id"`
			NotificationID string    `ch:"notification_id"`
			Recipient      string    `ch:"recipient"`
			DeviceID       string    `ch:"device_id"`
			Channel        string    `ch:"channel"`
			AttemptsMade   int32     `ch:"attempts_made"`
			AttemptsLeft   int32     `ch:"attempts_left"`
			LastResult     string    `ch:"last_result"`
			LastReason     string    `ch:"last_reason"`
			LastAt         time.Time `ch:"last_at"`
		}
		run(t, "near_retry_limit", &rows, map[string]string{"since": queries.Time(until.Add(-49 * time.Hour)),
			"max_attempts": fmt.Sprint(fixture.MaxAttempts), "margin": "1"})
		done := map[string]bool{}
		for _, o := range f.Outcomes {
			done[o.DeliveryID] = true
		}
		type last struct {
			n      int
			result string
		}
		lastOf := map[string]last{}
		for _, a := range f.Attempts {
			if l, ok := lastOf[a.DeliveryID]; !ok || a.Attempt >= l.n {
				lastOf[a.DeliveryID] = last{a.Attempt, a.Result}
			}
		}
		var got, want []string
		for _, r := range rows {
			got = append(got, fmt.Sprintf("%s %d %d %s", r.DeliveryID, r.AttemptsMade, r.AttemptsLeft, r.LastResult))
		}
		for id, l := range lastOf {
			if !done[id] && l.n >= fixture.MaxAttempts-1 && (l.result == schemas.AttemptRetryable || l.result == schemas.AttemptAmbiguous) {
				want = append(want, fmt.Sprintf("%s %d %d %s", id, l.n, fixture.MaxAttempts-l.n, l.result))
			}
		}
		sort.Strings(got)
		sort.Strings(want)
		if !slices.Equal(got, want) || len(want) == 0 {
			t.Fatalf("query %q\nattempts %q (want at least one)", got, want)
		}
	})
}
