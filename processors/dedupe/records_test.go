package dedupe

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/schemas"
)

// process runs one record through task as the runtime does and returns
// everything it emitted.
func process(t *testing.T, task *Task, r schemas.Request, offset int64, at time.Time) []*kgo.Record {
	t.Helper()
	b, err := schemas.Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	var out stage.Out
	if err := task.Process(&kgo.Record{Topic: "requests", Partition: 3, Key: []byte(r.NotificationID), Value: b, Offset: offset, Timestamp: at}, &out); err != nil {
		t.Fatal(err)
	}
	return outRecords(&out)
}

func header(r *kgo.Record) string {
	for _, h := range r.Headers {
		if h.Key == schemas.HeaderSchema {
			return string(h.Value)
		}
	}
	return ""
}

func TestAnAcceptedRequestEmitsItsDecisionItsSeenEntriesAndItsNotification(t *testing.T) {
	p := Policy{DefaultWindowMs: 1000, TypeWindowMs: map[string]int64{"invoice.paid": 0}, IdempotencyTTLMs: 5000}
	task := NewTask(p, testTopics, 3)
	task.SeenPerKey = true // the batched layout: TestABucketRecord...
	r := req("paid", "inv_1", "evt_1")
	r.Payload, r.Locale, r.Channels, r.Producer, r.CreatedAt = json.RawMessage(`{"amount":1}`), "fr-FR", []string{"apns"}, "billing", 42
	at := time.UnixMilli(10_000)
	recs := process(t, task, r, 7, at)
	if len(recs) != 4 {
		t.Fatalf("%d records, want a decision, two seen entries and the notification", len(recs))
	}
	dedupeScope := identity.DedupeID(r.Tenant, r.Type, r.Recipient, r.DedupeKey)
	idemScope := identity.IdempotencyID(r.Tenant, r.Type, r.Recipient, r.IdempotencyKey)

	// A task writing every record as JSON, for a rolling upgrade.
	jsonTask := NewTask(p, testTopics, 3)
	jsonTask.SeenJSON, jsonTask.RecordFormat = true, schemas.FormatJSON
	jsonRecs := process(t, jsonTask, r, 7, at)
	for _, format := range []struct {
		schema string
		recs   []*kgo.Record
	}{{schemas.DecisionV2, recs}, {schemas.DecisionV1, jsonRecs}} {
		t.Run("the decision in "+format.schema+" names the request and its position", func(t *testing.T) {
			d := format.recs[0]
			var got schemas.Decision
			if err := schemas.Decode(d.Value, &got); err != nil {
				t.Fatal(err)
			}
			if d.Topic != "decisions" || string(d.Key) != r.NotificationID || !d.Timestamp.Equal(at) || header(d) != format.schema || got.Schema != format.schema {
				t.Fatalf("decision record %s/%s at %v header %q schema %q", d.Topic, d.Key, d.Timestamp, header(d), got.Schema)
			}
			if got.Outcome != schemas.DecisionAccepted || got.DecisionID != "dedupe/requests/3/7" || got.RequestID != r.RequestID || got.At != at.UnixMilli() ||
				got.SourcePartition != 3 || got.SourceOffset != 7 || got.DedupeKey != r.DedupeKey || got.IdempotencyKey != r.IdempotencyKey || got.Producer != "billing" {
				t.Fatalf("decision %+v", got)
			}
		})
	}
	for _, format := range []struct {
		schema string
		recs   []*kgo.Record
	}{{schemas.SeenEntryV2, recs}, {schemas.SeenEntryV1, jsonRecs}} {
		t.Run("seen entries in "+format.schema+" go to the input partition, scoped and timed by the policy", func(t *testing.T) {
			want := []struct {
				kind    schemas.SeenKind
				scope   string
				expires int64
			}{{schemas.SeenDedupe, dedupeScope, 11_000}, {schemas.SeenIdempotency, idemScope, 15_000}}
			for i, w := range want {
				s := format.recs[1+i]
				var e schemas.SeenEntry
				if err := schemas.Decode(s.Value, &e); err != nil {
					t.Fatal(err)
				}
				if s.Topic != "seen" || s.Partition != 3 || string(s.Key) != schemas.SeenKey(w.kind, w.scope) || header(s) != format.schema || e.Schema != format.schema {
					t.Fatalf("seen record %s/%d key %s header %q schema %q", s.Topic, s.Partition, s.Key, header(s), e.Schema)
				}
				if e.Kind != w.kind || e.Scope != w.scope || e.FirstAt != 10_000 || e.ExpiresAt != w.expires || e.SourcePartition != 3 || e.SourceOffset != 7 ||
					e.ContentHash != r.ContentHash() || e.Outcome != schemas.DecisionAccepted || e.RequestID != r.RequestID || e.NotificationID != r.NotificationID {
					t.Fatalf("seen entry %+v, want kind %s scope %s expiring at %d", e, w.kind, w.scope, w.expires)
				}
			}
		})
	}
	for _, format := range []struct {
		schema string
		recs   []*kgo.Record
	}{{schemas.AcceptedV2, recs}, {schemas.AcceptedV1, jsonRecs}} {
		t.Run("the notification in "+format.schema+" goes to the route stage keyed by recipient", func(t *testing.T) {
			a := format.recs[3]
			var got schemas.Accepted
			if err := schemas.Decode(a.Value, &got); err != nil {
				t.Fatal(err)
			}
			want := schemas.Accepted{Schema: format.schema, NotificationID: r.NotificationID, OccurrenceID: identity.OccurrenceID(r.NotificationID, 10_000),
				RequestID: r.RequestID, Tenant: r.Tenant, Type: r.Type,
				Recipient: r.Recipient, Title: r.Title, Body: r.Body, Payload: r.Payload, Locale: r.Locale, Channels: r.Channels,
				DedupeKey: r.DedupeKey, IdempotencyKey: r.IdempotencyKey, Producer: r.Producer, RequestedAt: 42, AcceptedAt: 10_000}
			if a.Topic != "accepted" || string(a.Key) != schemas.RecipientKey(r.Tenant, r.Recipient) || header(a) != format.schema || !reflect.DeepEqual(got, want) {
				t.Fatalf("accepted record %s/%s header %q: %+v, want %+v", a.Topic, a.Key, header(a), got, want)
			}
		})
	}
	t.Run("a duplicate emits its decision and its idempotency entry, no notification", func(t *testing.T) {
		task.Commit()
		other := req("paid again", "inv_1", "evt_2")
		recs := process(t, task, other, 8, at.Add(500*time.Millisecond))
		if len(recs) != 2 || recs[0].Topic != "decisions" || recs[1].Topic != "seen" {
			t.Fatalf("%d records, want a decision and a seen entry", len(recs))
		}
		var e schemas.SeenEntry
		if err := schemas.Decode(recs[1].Value, &e); err != nil {
			t.Fatal(err)
		}
		if e.Kind != schemas.SeenIdempotency || e.Outcome != schemas.DecisionDuplicate || e.ExpiresAt != 15_500 {
			t.Fatalf("entry %+v, want the duplicate's own idempotency entry", e)
		}
	})
}
