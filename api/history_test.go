package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/heraldhq/herald/analytics/audit"
	"github.com/heraldhq/herald/analytics/auditwriter"
	"github.com/heraldhq/herald/analytics/dashboard"
	"github.com/heraldhq/herald/internal/testenv"
	routestage "github.com/heraldhq/herald/processors/route"
	"github.com/heraldhq/herald/sdk"
)

func TestTheRecordFromTheAuditIsTheFirstRequestAndEveryEventInTimeOrder(t *testing.T) {
	const id = "52f364d9288c640b306b566e509104bd"
	at := time.UnixMilli(1_765_000_000_000).UTC()
	tl := &audit.Timeline{
		Requests: []audit.Request{
			{At: at.Add(time.Minute), RequestID: "r2", NotificationID: id, Type: "invoice.paid", Recipient: "u1", IDSource: "dedupe_key", DedupeKey: "k"},
			{At: at, RequestID: "r1", NotificationID: id, Type: "invoice.paid", Recipient: "u1", IDSource: "dedupe_key", DedupeKey: "k", Title: "Paid", Body: "Thanks",
				Payload: `{"invoice":"inv_1"}`, Source: "api"},
		},
		Decisions: []audit.Decision{
			{At: at.Add(time.Minute), Stage: "dedupe", Outcome: "duplicate", RequestID: "r2", NotificationID: id},
			{At: at, Stage: "route", Outcome: "routed", RequestID: "r1", NotificationID: id, DeliveryIDs: []string{"d1"}, DeliveryChannels: []string{"apns"}},
			{At: at, Stage: "dedupe", Outcome: "accepted", RequestID: "r1", NotificationID: id},
		},
		Outcomes: []audit.Outcome{{At: at.Add(time.Second), DeliveryID: "d1", NotificationID: id, Channel: "apns", Status: "delivered", Attempts: 1}},
	}
	// Audit rows come in table order; the first request is the earliest.
	tl.Requests[0], tl.Requests[1] = tl.Requests[1], tl.Requests[0]
	rec, ok := recordFromAudit(tl, id)
	if !ok {
		t.Fatal("no record")
	}
	if rec.RequestID != "r1" || rec.Title != "Paid" || rec.Body != "Thanks" || string(rec.Payload) != `{"invoice":"inv_1"}` || rec.Status != sdk.StatusDelivered || rec.CreatedAt != at.UnixMilli() {
		t.Fatalf("record %+v; want the first request r1, delivered (its one delivery's outcome)", rec)
	}
	var kinds []string
	for _, e := range rec.Timeline {
		kinds = append(kinds, e.Kind+"/"+e.Outcome+e.Status)
	}
	want := []string{"requested/", "decision/routed", "decision/accepted", "outcome/delivered", "requested/", "decision/duplicate"}
	if len(kinds) != len(want) {
		t.Fatalf("timeline %v, want %v", kinds, want)
	}
	for i := range want {
		if kinds[i] != want[i] {
			t.Fatalf("timeline %v, want %v", kinds, want)
		}
	}
	if _, ok := recordFromAudit(&audit.Timeline{Outcomes: tl.Outcomes}, id); ok {
		t.Fatal("outcomes alone made a record: the audit holds no request or decision of it")
	}
}

// TestAnyInstanceFindsANotificationInTheAuditHowEverManyWereSentSince is
// the front door's history promise: GET /v1/notifications/{id} reads the
// year-long audit, so an instance that never saw the send (here, one that
// is not even connected to Kafka) answers it with its whole timeline after
// a million newer notifications, and the read model's size does not bound
// it.
func TestAnyInstanceFindsANotificationInTheAuditHowEverManyWereSentSince(t *testing.T) {
	conn, _, db := testenv.AuditDB(t)
	ctx := context.Background()
	const id = "0f9e8d7c6b5a49382716f5e4d3c2b1a0"
	at := time.Now().UTC().Add(-400 * 24 * time.Hour / 2) // two hundred days ago
	exec := func(q string, args ...any) {
		t.Helper()
		if err := conn.Exec(ctx, q, args...); err != nil {
			t.Fatal(err)
		}
	}
	exec("INSERT INTO `"+db+"`.requests (kafka_topic, kafka_partition, kafka_offset, at, request_id, tenant, type, recipient, notification_id, id_source, dedupe_key, title, source) VALUES ('herald.requests', 3, 17, ?, 'req-1', 'ta', 'invoice.paid', 'u1', ?, 'dedupe_key', 'k1', 'Paid', 'api')", at, id)
	exec("INSERT INTO `"+db+"`.decisions (kafka_topic, kafka_partition, kafka_offset, at, decision_id, stage, outcome, request_id, tenant, type, recipient, notification_id) VALUES ('herald.decisions', 3, 20, ?, 'dec-1', 'dedupe', 'accepted', 'req-1', 'ta', 'invoice.paid', 'u1', ?)", at, id)
	exec("INSERT INTO `"+db+"`.outcomes (kafka_topic, kafka_partition, kafka_offset, at, delivery_id, notification_id, tenant, type, recipient, device_id, channel, status, attempts) VALUES ('herald.outcomes', 1, 5, ?, 'del-1', ?, 'ta', 'invoice.paid', 'u1', 'ios-a', 'apns', 'delivered', 1)", at.Add(time.Second), id)

	// A million newer notifications, each a request and its decision.
	exec("INSERT INTO `"+db+"`.requests (kafka_topic, kafka_partition, kafka_offset, at, request_id, tenant, type, recipient, notification_id, id_source, title, source) "+
		"SELECT 'herald.requests', 0, 100 + number, ? + toIntervalSecond(1 + number % 86400), concat('r', toString(number)), 'ta', 'invoice.paid', concat('u', toString(number)), "+
		"lower(hex(MD5(toString(number)))), 'random', 'newer', 'api' FROM numbers(1000000)", at)
	exec("INSERT INTO `"+db+"`.decisions (kafka_topic, kafka_partition, kafka_offset, at, decision_id, stage, outcome, request_id, tenant, type, recipient, notification_id) "+
		"SELECT 'herald.decisions', 0, 100 + number, ? + toIntervalSecond(1 + number % 86400), concat('d', toString(number)), 'dedupe', 'accepted', concat('r', toString(number)), 'ta', 'invoice.paid', "+
		"concat('u', toString(number)), lower(hex(MD5(toString(number)))) FROM numbers(1000000)", at)
	s := unstarted(t, func(c *Config) {
		c.Dashboard = &dashboard.Source{Conn: conn, Database: db}
		c.MaxTracked = 1 // the read model could hold one notification: it is not asked
	})
	t.Run("the tenant's notification is found with its timeline", func(t *testing.T) {
		w := do(t, s, "GET", "/v1/notifications/"+id, keyA, "")
		if w.Code != http.StatusOK {
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
		var rec sdk.NotificationRecord
		if err := json.Unmarshal(w.Body.Bytes(), &rec); err != nil {
			t.Fatal(err)
		}
		if rec.RequestID != "req-1" || rec.Status != "accepted" || len(rec.Timeline) != 3 || rec.Timeline[2].Status != "delivered" {
			t.Fatalf("record %+v", rec)
		}
	})
	t.Run("another tenant's key does not find it", func(t *testing.T) {
		if w := do(t, s, "GET", "/v1/notifications/"+id, keyB, ""); w.Code != http.StatusNotFound {
			t.Fatalf("status %d, want 404", w.Code)
		}
	})
	t.Run("an id the audit does not hold is not found", func(t *testing.T) {
		if w := do(t, s, "GET", "/v1/notifications/00000000000000000000000000000001", keyA, ""); w.Code != http.StatusNotFound {
			t.Fatalf("status %d, want 404", w.Code)
		}
	})
}

// TestANotificationTheCacheEvictedIsReadFromTheAuditOnTheRealBroker shows
// the mechanism behind "after 1,000,000 newer sends, still 200 with its
// full timeline" on the whole pipeline (API, dedupe and route stages,
// audit writer, real broker and ClickHouse): the instance's cache of its
// own sends holds only MaxTracked of them, and once newer sends have
// evicted a notification, GET /v1/notifications/{id} answers it from the
// audit with every event. The million itself is BENCHMARKS.md's [J]
// command (scripts/bench-api --preload), and
// TestAnyInstanceFindsANotificationInTheAuditHowEverManyWereSentSince
// reads one back from behind a million audit rows.
func TestANotificationTheCacheEvictedIsReadFromTheAuditOnTheRealBroker(t *testing.T) {
	conn, _, db := testenv.AuditDB(t)
	const cached = 4
	p := startPipeline(t, func(c *Config) {
		c.WaitForRoute = true
		c.Dashboard = &dashboard.Source{Conn: conn, Database: db}
		c.MaxTracked = cached
	})
	p.startRoute(t, routestage.Policy{}, time.Second)
	p.startAuditWriter(t, conn, db)
	if a := p.call(t, "PUT", "/v1/users/h0/devices/phone", keyA, `{"platform":"ios","token":"a"}`); a.status != 201 {
		t.Fatalf("register: %d %s", a.status, a.body)
	}

	send := func(t *testing.T, recipients string) sdk.SendResult {
		t.Helper()
		a := p.call(t, "POST", "/v1/notifications", keyA, `{"type":"order.shipped","recipients":[`+recipients+`],"title":"t","body":"b"}`, "Prefer", "wait=60")
		if a.status != 202 {
			t.Fatalf("send: %d %s", a.status, a.body)
		}
		return decode[sdk.SendResult](t, a)
	}
	first := send(t, `"h0"`)
	id := first.Notifications[0].ID
	if len(first.Deliveries) != 2 {
		t.Fatalf("first send answered deliveries %+v, want the phone and the feed", first.Deliveries)
	}
	if _, ok := p.srv.tr.record("ta", id); !ok {
		t.Fatal("the cache does not hold the instance's own send")
	}
	// Newer sends, 1,000 recipients each, from 8 callers, not waiting:
	// 10×the cache by default, HERALD_TEST_HISTORY_NEWER of them when set
	// (BENCHMARKS.md runs it once with 1,000,000).
	newer := 10 * cached
	if v := os.Getenv("HERALD_TEST_HISTORY_NEWER"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("HERALD_TEST_HISTORY_NEWER=%q: want a positive count", v)
		}
		newer = n
	}
	start := time.Now()
	var sent atomic.Int64
	var senders sync.WaitGroup
	for w := range 8 {
		senders.Add(1)
		go func() {
			defer senders.Done()
			for from := 1 + w*1000; from <= newer; from += 8 * 1000 {
				var rs []string
				for i := from; i < from+1000 && i <= newer; i++ {
					rs = append(rs, fmt.Sprintf(`"h%d"`, i))
				}
				a := p.call(t, "POST", "/v1/notifications", keyA, `{"type":"order.shipped","recipients":[`+strings.Join(rs, ",")+`],"title":"t","body":"b"}`)
				if a.status != 202 {
					t.Errorf("newer send: %d %s", a.status, a.body)
					return
				}
				sent.Add(int64(len(rs)))
			}
		}()
	}
	senders.Wait()
	if t.Failed() || sent.Load() != int64(newer) {
		t.Fatalf("%d of %d newer notifications sent", sent.Load(), newer)
	}
	t.Logf("%d newer notifications sent in %s", newer, time.Since(start).Round(time.Millisecond))
	if _, ok := p.srv.tr.record("ta", id); ok {
		t.Fatalf("the cache of %d still holds the first of %d sends", cached, newer+1)
	}

	var rec sdk.NotificationRecord
	p.eventually(t, "the audit holds the first notification's request and both stages' decisions", func() bool {
		a := p.call(t, "GET", "/v1/notifications/"+id, keyA, "")
		if a.status != 200 {
			return false
		}
		rec = decode[sdk.NotificationRecord](t, a)
		return len(rec.Timeline) >= 3
	})
	var kinds []string
	for _, e := range rec.Timeline {
		kinds = append(kinds, e.Kind+"/"+e.Stage+"/"+e.Outcome)
	}
	if rec.RequestID != first.RequestID || rec.Recipient != "h0" || rec.Title != "t" ||
		!slices.Contains(kinds, "requested//") || !slices.Contains(kinds, "decision/dedupe/accepted") || !slices.Contains(kinds, "decision/route/routed") {
		t.Fatalf("record %+v, timeline %v; want the first send's request and its dedupe and route decisions", rec, kinds)
	}
}

// startAuditWriter copies the pipeline's topics into the audit database
// db until the test ends.
func (p *pipeline) startAuditWriter(t *testing.T, conn driver.Conn, db string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		err := auditwriter.Run(ctx, auditwriter.Options{Brokers: p.brokers, Catalog: p.cat, ClickHouse: conn, Database: db,
			FlushInterval: 100 * time.Millisecond, Logger: p.cfg.Logger})
		if err != nil && ctx.Err() == nil {
			t.Errorf("audit writer: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
}
