package auditwriter_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/heraldhq/herald/analytics/internal/fixture"
	"github.com/heraldhq/herald/schemas"
)

// TestAPipelineRunLandsInClickHouseExactlyOnce runs the dedupe stage over
// requests with duplicates, idempotent retries, a conflict and rejections,
// adds attempts and outcomes with retries and failures (produced by the
// fixture: the sinks are not built yet), runs the audit writer, and checks
// ClickHouse against the records.
func TestAPipelineRunLandsInClickHouseExactlyOnce(t *testing.T) {
	f := fixture.Run(t)
	ctx := context.Background()
	count := func(t *testing.T, q string, args ...any) int {
		t.Helper()
		var n uint64
		if err := f.Conn.QueryRow(ctx, q, args...).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return int(n)
	}

	for table, want := range f.Counts() {
		t.Run(fmt.Sprintf("the %s table holds one row per record of its topic", table), func(t *testing.T) {
			physical := count(t, "SELECT count() FROM "+table)
			distinct := count(t, "SELECT uniqExact(kafka_topic, kafka_partition, kafka_offset) FROM "+table)
			final := count(t, "SELECT count() FROM "+table+" FINAL")
			if physical != want || distinct != want || final != want {
				t.Fatalf("rows %d, distinct positions %d, after FINAL %d; the topic holds %d records", physical, distinct, final, want)
			}
		})
	}

	t.Run("records of an aborted transaction never reach the audit", func(t *testing.T) {
		if f.Aborted == 0 {
			t.Fatal("the fixture produced no aborted records")
		}
		if n := count(t, "SELECT count() FROM attempts WHERE delivery_id = 'aborted'"); n != 0 {
			t.Fatalf("%d aborted attempts in the audit", n)
		}
	})

	t.Run("a request that does not decode is kept with its error and raw value", func(t *testing.T) {
		n := count(t, "SELECT count() FROM requests WHERE decode_error != '' AND raw != ''")
		if n != f.Undecodable {
			t.Fatalf("%d undecodable rows, want %d", n, f.Undecodable)
		}
	})

	t.Run("the hit-rate view equals hits/(hits+misses) computed from the decisions", func(t *testing.T) {
		type key struct {
			tenant, typ string
			hour        time.Time
		}
		type hm struct{ hits, misses uint64 }
		want := map[key]hm{}
		for _, d := range f.Decisions {
			if d.Stage != "dedupe" {
				continue
			}
			k := key{d.Tenant, d.Type, time.UnixMilli(d.At).UTC().Truncate(time.Hour)}
			c := want[k]
			switch d.Outcome {
			case schemas.DecisionDuplicate, schemas.DecisionIdempotentReplay:
				c.hits++
			case schemas.DecisionAccepted:
				c.misses++
			}
			want[k] = c
		}
		var rows []struct {
			Tenant  string    `ch:"tenant"`
			Type    string    `ch:"type"`
			Hour    time.Time `ch:"hour"`
			Hits    uint64    `ch:"hits"`
			Misses  uint64    `ch:"misses"`
			HitRate *float64  `ch:"hit_rate"`
		}
		if err := f.Conn.Select(ctx, &rows, "SELECT tenant, type, hour, hits, misses, hit_rate FROM dedupe_hit_rate_hourly"); err != nil {
			t.Fatal(err)
		}
		if len(rows) != len(want) {
			t.Errorf("view has %d (tenant, type, hour) rows, decisions give %d", len(rows), len(want))
		}
		var hits uint64
		for _, r := range rows {
			w, ok := want[key{r.Tenant, r.Type, r.Hour.UTC()}]
			if !ok {
				t.Errorf("view row %s/%s %s has no decisions", r.Tenant, r.Type, r.Hour)
				continue
			}
			hits += r.Hits
			if r.Hits != w.hits || r.Misses != w.misses {
				t.Errorf("%s/%s %s: view hits/misses %d/%d, decisions %d/%d", r.Tenant, r.Type, r.Hour, r.Hits, r.Misses, w.hits, w.misses)
			}
			switch {
			case w.hits+w.misses == 0:
				if r.HitRate != nil {
					t.Errorf("%s/%s %s: hit rate %v for an hour without hits or misses, want NULL", r.Tenant, r.Type, r.Hour, *r.HitRate)
				}
			case r.HitRate == nil || math.Abs(*r.HitRate-float64(w.hits)/float64(w.hits+w.misses)) > 1e-12:
				t.Errorf("%s/%s %s: hit rate %v, want %d/%d", r.Tenant, r.Type, r.Hour, r.HitRate, w.hits, w.hits+w.misses)
			}
		}
		if hits == 0 {
			t.Error("the fixture produced no hits at all")
		}
	})

	t.Run("decisions by reason add up to the decisions of every reason", func(t *testing.T) {
		want := map[string]uint64{}
		for _, d := range f.Decisions {
			want[d.Stage+"/"+d.Outcome]++
		}
		var rows []struct {
			Stage   string `ch:"stage"`
			Outcome string `ch:"outcome"`
			N       uint64 `ch:"n"`
		}
		if err := f.Conn.Select(ctx, &rows, "SELECT stage, outcome, sum(decisions) AS n FROM decisions_by_reason_hourly GROUP BY stage, outcome"); err != nil {
			t.Fatal(err)
		}
		got := map[string]uint64{}
		for _, r := range rows {
			got[r.Stage+"/"+r.Outcome] = r.N
		}
		for _, reason := range []string{schemas.DecisionAccepted, schemas.DecisionDuplicate, schemas.DecisionIdempotentReplay,
			schemas.DecisionIdempotencyConflict, schemas.DecisionRejected} {
			if want["dedupe/"+reason] == 0 {
				t.Errorf("the fixture produced no %s decision", reason)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("by reason %v, decisions %v", got, want)
		}
	})

	t.Run("attempts and outcomes by channel and classification match the records", func(t *testing.T) {
		wantA, wantO := map[string]uint64{}, map[string]uint64{}
		for _, a := range f.Attempts {
			wantA[a.Channel+"/"+a.Result+"/"+a.Classification]++
		}
		for _, o := range f.Outcomes {
			wantO[o.Channel+"/"+o.Status+"/"+o.Reason]++
		}
		var ra []struct {
			K string `ch:"k"`
			N uint64 `ch:"n"`
		}
		if err := f.Conn.Select(ctx, &ra, "SELECT concat(channel, '/', result, '/', classification) AS k, sum(attempts) AS n FROM attempts_by_channel_hourly GROUP BY k"); err != nil {
			t.Fatal(err)
		}
		var ro []struct {
			K string `ch:"k"`
			N uint64 `ch:"n"`
		}
		if err := f.Conn.Select(ctx, &ro, "SELECT concat(channel, '/', status, '/', reason) AS k, sum(deliveries) AS n FROM outcomes_by_channel_hourly GROUP BY k"); err != nil {
			t.Fatal(err)
		}
		gotA, gotO := map[string]uint64{}, map[string]uint64{}
		for _, r := range ra {
			gotA[r.K] = r.N
		}
		for _, r := range ro {
			gotO[r.K] = r.N
		}
		if fmt.Sprint(gotA) != fmt.Sprint(wantA) {
			t.Errorf("attempts by channel %v, records %v", gotA, wantA)
		}
		if fmt.Sprint(gotO) != fmt.Sprint(wantO) {
			t.Errorf("outcomes by channel %v, records %v", gotO, wantO)
		}
	})

	t.Run("logical notifications and transport attempts are told apart", func(t *testing.T) {
		type nums struct{ requests, notifications, deliveries, attempts uint64 }
		want := map[string]nums{}
		for _, r := range f.Requests {
			n := want[r.Tenant+"/"+r.Type]
			n.requests++
			want[r.Tenant+"/"+r.Type] = n
		}
		for _, d := range f.Decisions {
			if d.Stage != "dedupe" {
				continue
			}
			// Every (tenant, type) with a decision has a row, even one
			// whose only decisions are rejections.
			n := want[d.Tenant+"/"+d.Type]
			if d.Outcome == schemas.DecisionAccepted {
				n.notifications++
			}
			want[d.Tenant+"/"+d.Type] = n
		}
		for _, o := range f.Outcomes {
			n := want[o.Tenant+"/"+o.Type]
			n.deliveries++
			want[o.Tenant+"/"+o.Type] = n
		}
		for _, a := range f.Attempts {
			n := want[a.Tenant+"/"+a.Type]
			n.attempts++
			want[a.Tenant+"/"+a.Type] = n
		}
		var rows []struct {
			K             string `ch:"k"`
			Requests      uint64 `ch:"requests"`
			Notifications uint64 `ch:"notifications"`
			Deliveries    uint64 `ch:"deliveries"`
			Attempts      uint64 `ch:"attempts"`
		}
		if err := f.Conn.Select(ctx, &rows, `SELECT concat(tenant, '/', type) AS k, sum(requests) AS requests, sum(notifications) AS notifications,
			sum(deliveries) AS deliveries, sum(attempts) AS attempts FROM notifications_vs_attempts_hourly GROUP BY k`); err != nil {
			t.Fatal(err)
		}
		got := map[string]nums{}
		for _, r := range rows {
			got[r.K] = nums{r.Requests, r.Notifications, r.Deliveries, r.Attempts}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("view %v\nrecords %v", got, want)
		}
		var sawRetries bool
		for _, n := range want {
			sawRetries = sawRetries || n.attempts > n.deliveries
		}
		if !sawRetries {
			t.Error("the fixture has no retries: attempts never exceed deliveries")
		}
	})
}
