package auditwriter

import (
	"reflect"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/schemas"
)

// valueOf returns row i of the named column of b.
func valueOf(t *testing.T, b batch, name string, i int) any {
	t.Helper()
	names, cols := b.columns()
	for j, n := range names {
		if n == name {
			return reflect.ValueOf(cols[j]).Index(i).Interface()
		}
	}
	t.Fatalf("no column %s in %v", name, names)
	return nil
}

// encoded is r's record at partition 0, offset off, record time ts.
func encoded(t *testing.T, r schemas.Record, off int64, ts time.Time) *kgo.Record {
	t.Helper()
	b, err := schemas.Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	return &kgo.Record{Topic: "t", Offset: off, Value: b, Timestamp: ts}
}

func TestEveryTablesRowCarriesItsRecordsFieldsAndAnUndecodableOneNone(t *testing.T) {
	ts := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	at := ts.UnixMilli()
	cases := []struct {
		name   string
		b      batch
		valid  schemas.Record
		column string // a column the record fills
		want   string
		// other is a record of another schema: valid JSON that decodes
		// into the batch's record type and fills the column too.
		other schemas.Record
	}{
		{"a request row", newRequestsBatch(), &schemas.Request{RequestID: "req-1", CreatedAt: at}, "request_id", "req-1",
			&schemas.Decision{RequestID: "req-x", At: at}},
		{"a decision row", newDecisionsBatch(), &schemas.Decision{DecisionID: "dec-1", At: at}, "decision_id", "dec-1",
			&schemas.Attempt{NotificationID: "n-x", At: at}},
		{"a herald.request/v2 row", newRequestsBatch(), &schemas.Request{Schema: schemas.RequestV2, RequestID: "req-1", CreatedAt: at}, "request_id", "req-1",
			&schemas.Decision{Schema: schemas.DecisionV2, RequestID: "req-x", At: at}},
		{"a herald.decision/v2 row", newDecisionsBatch(), &schemas.Decision{Schema: schemas.DecisionV2, DecisionID: "dec-1", At: at}, "decision_id", "dec-1",
			&schemas.Request{Schema: schemas.RequestV2, RequestID: "req-x", CreatedAt: at}},
		{"an attempt row", newAttemptsBatch(), &schemas.Attempt{AttemptID: "att-1", At: at}, "attempt_id", "att-1",
			&schemas.Outcome{DeliveryID: "del-x", At: at}},
		{"an outcome row", newOutcomesBatch(), &schemas.Outcome{DeliveryID: "del-1", At: at}, "delivery_id", "del-1",
			&schemas.Attempt{DeliveryID: "del-x", At: at}},
		{"a receipt row", newReceiptsBatch(), &schemas.Receipt{ReceiptID: "rcp-1", At: at}, "receipt_id", "rcp-1",
			&schemas.Decision{NotificationID: "n-x", At: at}},
		{"a feed item row", newFeedItemsBatch(), &schemas.FeedItem{NotificationID: "n-1", Title: "t", CreatedAt: at}, "notification_id", "n-1",
			&schemas.Receipt{NotificationID: "n-x", At: at}},
	}
	for _, c := range cases {
		t.Run(c.name+" carries its record's fields, and one of another schema carries none but its decode error", func(t *testing.T) {
			add(c.b, encoded(t, c.valid, 1, ts))
			other := encoded(t, c.other, 2, ts)
			add(c.b, other)
			add(c.b, &kgo.Record{Topic: "t", Offset: 3, Value: []byte("not json"), Timestamp: ts})
			if got := valueOf(t, c.b, c.column, 0); got != c.want {
				t.Fatalf("%s of the valid record = %q, want %q", c.column, got, c.want)
			}
			if got := valueOf(t, c.b, "decode_error", 0); got != "" {
				t.Fatalf("decode_error of the valid record = %q, want none", got)
			}
			for i := 1; i <= 2; i++ {
				if got := valueOf(t, c.b, "decode_error", i); got == "" {
					t.Fatalf("row %d (not this table's record) has no decode_error", i)
				}
			}
			// The other schema's record decodes as JSON; none of its
			// fields may be taken for this table's.
			names, _ := c.b.columns()
			for _, n := range names {
				switch n {
				case "kafka_topic", "kafka_partition", "kafka_offset", "at", "decode_error", "raw":
					continue
				}
				if v := valueOf(t, c.b, n, 1); !empty(v) {
					t.Fatalf("column %s = %v for a record of another schema, want it empty", n, v)
				}
			}
		})
	}
}

// empty reports whether a column value is the zero value, an empty slice
// or the zero time (the epoch, as ms writes it).
func empty(v any) bool {
	if tm, ok := v.(time.Time); ok {
		return tm.Equal(time.Unix(0, 0))
	}
	rv := reflect.ValueOf(v)
	return rv.IsZero() || rv.Kind() == reflect.Slice && rv.Len() == 0
}

func TestARowWithoutATimeOfItsOwnTakesItsRecordsTime(t *testing.T) {
	recTime := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	b := newAttemptsBatch()
	// An attempt with no time (At 0): the row's time, and so its month
	// (the table's partition, part of the deduplication token), is the
	// record's.
	if m := b.load(encoded(t, &schemas.Attempt{AttemptID: "a", At: 0}, 1, recTime)); m != 202611 {
		t.Fatalf("month %d of a row without a time, want 202611 (its record's)", m)
	}
	b.keep()
	if got := valueOf(t, b, "at", 0).(time.Time); !got.Equal(recTime) {
		t.Fatalf("at %s, want the record time %s", got, recTime)
	}
	// One with a time keeps it.
	own := time.Date(2026, 10, 31, 23, 0, 0, 0, time.UTC)
	if m := b.load(encoded(t, &schemas.Attempt{AttemptID: "b", At: own.UnixMilli()}, 2, recTime)); m != 202610 {
		t.Fatalf("month %d of a row at %s, want 202610", m, own)
	}
}

func TestARowsOptionalTimesAreItsRecordsAndTheEpochWhenItHasNone(t *testing.T) {
	ts := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	when := time.Date(2026, 11, 29, 8, 30, 0, 250e6, time.UTC)
	cases := []struct {
		name   string
		b      batch
		with   schemas.Record // a record with the time set to when
		column string
	}{
		{"a request's created_at", newRequestsBatch(), &schemas.Request{RequestID: "r", CreatedAt: when.UnixMilli()}, "created_at"},
		{"a decision's original_at", newDecisionsBatch(), &schemas.Decision{DecisionID: "d", OriginalAt: when.UnixMilli()}, "original_at"},
		{"a receipt's client_at", newReceiptsBatch(), &schemas.Receipt{ReceiptID: "c", ClientAt: when.UnixMilli()}, "client_at"},
	}
	for _, c := range cases {
		t.Run(c.name+" is the record's, or the epoch without one", func(t *testing.T) {
			add(c.b, encoded(t, c.with, 1, ts))
			add(c.b, &kgo.Record{Topic: "t", Offset: 2, Value: []byte("not json"), Timestamp: ts})
			if got := valueOf(t, c.b, c.column, 0).(time.Time); !got.Equal(when) {
				t.Fatalf("%s = %s, want the record's %s", c.column, got, when)
			}
			if got := valueOf(t, c.b, c.column, 1).(time.Time); !got.Equal(time.Unix(0, 0)) {
				t.Fatalf("%s = %s for a record without it, want the epoch", c.column, got)
			}
		})
	}
}

// TestTheDeduplicationTokenIsTheSameInEveryVersion pins the token of a
// batch: a writer upgraded while an insert's answer was lost retries it
// with the token the old one used, or ClickHouse stores the rows twice.
// The token must not depend on map order either (partitions are sorted).
func TestTheDeduplicationTokenIsTheSameInEveryVersion(t *testing.T) {
	nov := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	b := newDecisionsBatch()
	for _, pos := range [][2]int64{{2, 7}, {0, 3}, {1, 5}, {0, 4}, {2, 9}} {
		add(b, decisionAt(t, int32(pos[0]), pos[1], nov))
	}
	// The first 16 bytes of sha256("decisions|202611|5|0:3-4|1:5-5|2:7-9"):
	// table, month, rows, then each partition's first and last offsets in
	// partition order.
	const want = "herald-audit-9ea67e4c40d03f4390d31bb0c07bbdfc"
	if got := token("decisions", b); got != want {
		t.Fatalf("token %s, want %s", got, want)
	}
}
