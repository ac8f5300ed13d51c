// Package dashboardtest fills a test database with known audit rows for
// the dashboard's tests: two tenants' requests, decisions of both stages,
// attempts (sent, retryable, permanent, ambiguous) and outcomes on two
// channels over three hours, among them a delivery retried after an
// ambiguous timeout (may have been shown twice). The rows go into the
// audit tables, so the roll-ups are filled by their materialized views as
// the audit writer's inserts fill them. Tests compute what they expect
// from the rows returned, never from the dashboard's own SQL.
package dashboardtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/heraldhq/herald/internal/testenv"
)

// Decision is one decision row.
type Decision struct {
	At                                           time.Time
	Tenant, Type, Stage, Outcome, NotificationID string
}

// Attempt is one attempt row.
type Attempt struct {
	At                                                        time.Time
	Tenant, Type, Channel, Result, NotificationID, DeliveryID string
	N                                                         uint16
	LatencyMs                                                 int64
}

// Outcome is one outcome row.
type Outcome struct {
	At                                                        time.Time
	Tenant, Type, Channel, Status, NotificationID, DeliveryID string
	Attempts                                                  uint16
}

// Rows are the rows written.
type Rows struct {
	// Base is the start of the current hour when the rows were made; every
	// row is in one of the three hours before it.
	Base      time.Time
	Decisions []Decision
	Attempts  []Attempt
	Outcomes  []Outcome
	// ShownTwice is the notification of tenant "acme" whose apns delivery
	// was retried after an ambiguous timeout and then sent.
	ShownTwice string
}

// DB is a migrated test database holding Rows.
type DB struct {
	Addr, Name string
	// Conn's default database is Name.
	Conn driver.Conn
	Rows Rows
}

// Populate creates a test database on the ClickHouse test server, applies
// herald's migrations and writes the known rows.
func Populate(t testing.TB) *DB {
	t.Helper()
	conn, addr, db := testenv.AuditDB(t)
	ctx := context.Background()
	rows := Known(time.Now())
	if err := Write(ctx, conn, db, rows); err != nil {
		t.Fatal(err)
	}
	return &DB{Addr: addr, Name: db, Conn: conn, Rows: rows}
}

// Known returns the known rows, in the three hours before the hour of now.
func Known(now time.Time) Rows {
	base := now.UTC().Truncate(time.Hour)
	h := func(back int, min int) time.Time {
		return base.Add(-time.Duration(back)*time.Hour + time.Duration(min)*time.Minute)
	}
	var r Rows
	r.Base = base
	n := 0
	decide := func(at time.Time, tenant, typ, stage, outcome string) string {
		n++
		id := fmt.Sprintf("%s-%s-%03d", tenant, typ, n)
		r.Decisions = append(r.Decisions, Decision{at, tenant, typ, stage, outcome, id})
		return id
	}
	// acme, invoice.paid: hour -3: 3 accepted, 1 duplicate; hour -2: 1
	// accepted, 3 duplicates and a replay; order.shipped, hour -2: 2
	// accepted, and a conflict (neither hit nor miss).
	for i := range 3 {
		decide(h(3, i), "acme", "invoice.paid", "dedupe", "accepted")
	}
	decide(h(3, 5), "acme", "invoice.paid", "dedupe", "duplicate")
	decide(h(2, 1), "acme", "invoice.paid", "dedupe", "accepted")
	for i := range 3 {
		decide(h(2, 2+i), "acme", "invoice.paid", "dedupe", "duplicate")
	}
	decide(h(2, 6), "acme", "invoice.paid", "dedupe", "idempotent_replay")
	decide(h(2, 7), "acme", "order.shipped", "dedupe", "accepted")
	decide(h(2, 8), "acme", "order.shipped", "dedupe", "accepted")
	decide(h(2, 9), "acme", "order.shipped", "dedupe", "idempotency_conflict")
	// The route stage: 4 accepted, 1 rate limited, 1 opted out.
	for i := range 4 {
		decide(h(2, 20+i), "acme", "invoice.paid", "route", "accepted")
	}
	decide(h(2, 25), "acme", "invoice.paid", "route", "rate_limited")
	decide(h(2, 26), "acme", "order.shipped", "route", "opted_out")
	// globex: its own rows, which acme must never see.
	for i := range 5 {
		decide(h(1, i), "globex", "invoice.paid", "dedupe", "duplicate")
	}
	decide(h(1, 9), "globex", "welcome", "dedupe", "accepted")
	decide(h(1, 10), "globex", "welcome", "route", "digested")

	attempt := func(at time.Time, tenant, channel, result, nid, did string, k uint16, latency int64) {
		r.Attempts = append(r.Attempts, Attempt{at, tenant, "invoice.paid", channel, result, nid, did, k, latency})
	}
	outcome := func(at time.Time, tenant, channel, status, nid, did string, attempts uint16) {
		r.Outcomes = append(r.Outcomes, Outcome{at, tenant, "invoice.paid", channel, status, nid, did, attempts})
	}
	// acme apns: three deliveries sent at once; one retried after a
	// retryable failure; one retried after an ambiguous timeout (may have
	// been shown twice).
	for i := range 3 {
		id := fmt.Sprintf("acme-apns-d%d", i)
		attempt(h(2, 30+i), "acme", "apns", "sent", "acme-n-apns", id, 1, 40+int64(i)*10)
		outcome(h(2, 30+i), "acme", "apns", "delivered", "acme-n-apns", id, 1)
	}
	attempt(h(2, 40), "acme", "apns", "retryable", "acme-n-retry", "acme-apns-retry", 1, 100)
	attempt(h(2, 41), "acme", "apns", "sent", "acme-n-retry", "acme-apns-retry", 2, 60)
	outcome(h(2, 41), "acme", "apns", "delivered", "acme-n-retry", "acme-apns-retry", 2)
	r.ShownTwice = "acme-n-twice"
	attempt(h(2, 45), "acme", "apns", "ambiguous", r.ShownTwice, "acme-apns-twice", 1, 10000)
	attempt(h(2, 46), "acme", "apns", "sent", r.ShownTwice, "acme-apns-twice", 2, 50)
	outcome(h(2, 46), "acme", "apns", "delivered", r.ShownTwice, "acme-apns-twice", 2)
	// acme fcm: two sent, one permanent failure dead-lettered.
	for i := range 2 {
		id := fmt.Sprintf("acme-fcm-d%d", i)
		attempt(h(1, 10+i), "acme", "fcm", "sent", "acme-n-fcm", id, 1, 30)
		outcome(h(1, 10+i), "acme", "fcm", "delivered", "acme-n-fcm", id, 1)
	}
	attempt(h(1, 20), "acme", "fcm", "permanent", "acme-n-fcm", "acme-fcm-bad", 1, 20)
	outcome(h(1, 20), "acme", "fcm", "dead_lettered", "acme-n-fcm", "acme-fcm-bad", 1)
	// globex: a webpush delivery shown twice too, and one sent.
	attempt(h(1, 30), "globex", "webpush", "ambiguous", "globex-n-twice", "globex-wp-twice", 1, 10000)
	attempt(h(1, 31), "globex", "webpush", "sent", "globex-n-twice", "globex-wp-twice", 2, 80)
	outcome(h(1, 31), "globex", "webpush", "delivered", "globex-n-twice", "globex-wp-twice", 2)
	// The notification shown twice has its request's decisions too.
	r.Decisions = append(r.Decisions,
		Decision{h(2, 44), "acme", "invoice.paid", "dedupe", "accepted", r.ShownTwice},
		Decision{h(2, 44), "acme", "invoice.paid", "route", "accepted", r.ShownTwice})
	return r
}

// Write inserts rows into database's audit tables (conn's default
// database must be database), one position per row.
func Write(ctx context.Context, conn driver.Conn, database string, rows Rows) error {
	offset := int64(0)
	next := func() int64 { offset++; return offset }
	b, err := conn.PrepareBatch(ctx, "INSERT INTO `"+database+"`.decisions (kafka_topic, kafka_partition, kafka_offset, at, decision_id, stage, outcome, request_id, tenant, type, recipient, notification_id)")
	if err != nil {
		return fmt.Errorf("dashboardtest: decisions: %w", err)
	}
	for _, d := range rows.Decisions {
		o := next()
		if err := b.Append("herald.decisions", int32(0), o, d.At, fmt.Sprintf("dec-%d", o), d.Stage, d.Outcome, fmt.Sprintf("req-%d", o), d.Tenant, d.Type, "u_1", d.NotificationID); err != nil {
			return err
		}
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("dashboardtest: decisions: %w", err)
	}
	b, err = conn.PrepareBatch(ctx, "INSERT INTO `"+database+"`.attempts (kafka_topic, kafka_partition, kafka_offset, at, attempt_id, delivery_id, notification_id, tenant, type, recipient, device_id, channel, attempt, result, classification, collapse_id, latency_ms)")
	if err != nil {
		return fmt.Errorf("dashboardtest: attempts: %w", err)
	}
	for _, a := range rows.Attempts {
		o := next()
		if err := b.Append("herald.attempts", int32(0), o, a.At, fmt.Sprintf("att-%d", o), a.DeliveryID, a.NotificationID, a.Tenant, a.Type, "u_1", "dev-"+a.DeliveryID,
			a.Channel, a.N, a.Result, a.Result, "c-"+a.NotificationID, a.LatencyMs); err != nil {
			return err
		}
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("dashboardtest: attempts: %w", err)
	}
	b, err = conn.PrepareBatch(ctx, "INSERT INTO `"+database+"`.outcomes (kafka_topic, kafka_partition, kafka_offset, at, delivery_id, notification_id, tenant, type, recipient, device_id, channel, status, attempts)")
	if err != nil {
		return fmt.Errorf("dashboardtest: outcomes: %w", err)
	}
	for _, x := range rows.Outcomes {
		if err := b.Append("herald.outcomes", int32(0), next(), x.At, x.DeliveryID, x.NotificationID, x.Tenant, x.Type, "u_1", "dev-"+x.DeliveryID, x.Channel, x.Status, x.Attempts); err != nil {
			return err
		}
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("dashboardtest: outcomes: %w", err)
	}
	return nil
}
