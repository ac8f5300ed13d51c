package schemas_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	sjs "github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/heraldhq/herald/schemas"
)

var update = flag.Bool("update", false, "rewrite schemas/jsonschema/*.json from the Go types")

// samples holds one record of every type with every field set, so a round
// trip exercises every field.
func samples() []schemas.Record {
	payload := json.RawMessage(`{"invoice":"inv_2201","amount":12.5}`)
	sub := &schemas.WebPushSubscription{Endpoint: "https://push.example/e/1", P256dh: "BNc", Auth: "tBH"}
	return []schemas.Record{
		&schemas.Request{RequestID: "0190b3f2a1c47e0e8b1f2a3b4c5d6e7f", Tenant: "acme", Type: "invoice.paid", Recipient: "u_8831",
			NotificationID: "52f364d9288c640b306b566e509104bd", IDSource: "key", Key: json.RawMessage(`{"invoice":"inv_2201"}`),
			DedupeKey: "inv_2201", DedupeWindowMs: 60000, IdempotencyKey: "req-1", IdempotencyTTLMs: 86400000,
			Title: "Paid", Body: "Invoice <inv_2201> paid ✓", Payload: payload, Locale: "en-GB", Channels: []string{"apns", "webpush"}, TargetDevice: "dev-1",
			Producer: "billing", Source: "api", CreatedAt: 1764500000000},
		&schemas.Decision{DecisionID: "dedupe/3/42", Stage: "dedupe", Outcome: schemas.DecisionDuplicate, Detail: "seen 1s ago", RequestID: "r2", Tenant: "acme", OccurrenceID: "o1",
			Type: "invoice.paid", Recipient: "u_8831", NotificationID: "52f364d9288c640b306b566e509104bd", DedupeKey: "inv_2201",
			IdempotencyKey: "req-1", Producer: "billing", Channel: "apns", OriginalRequestID: "r1", OriginalNotificationID: "52f364d9288c640b306b566e509104bd",
			OriginalAt: 1764500000000, OriginalOutcome: schemas.DecisionAccepted,
			Deliveries: []schemas.DecisionDelivery{{DeliveryID: "d1", Channel: "apns", DeviceID: "dev-1", State: schemas.DeliveryDeferred, NotBefore: 7}}, At: 1764500001000, SourceTopic: "herald.requests", SourcePartition: 3, SourceOffset: 42},
		&schemas.SeenEntry{Kind: schemas.SeenDedupe, Scope: "0a1b", NotificationID: "52f364d9288c640b306b566e509104bd", RequestID: "r1",
			ContentHash: "ab12", Outcome: schemas.DecisionAccepted, FirstAt: 1, ExpiresAt: 2, SourcePartition: 3, SourceOffset: 41},
		&schemas.Accepted{NotificationID: "52f364d9288c640b306b566e509104bd", OccurrenceID: "c93c32e54caa0ba8e7a138709607f846", RequestID: "r1", Tenant: "acme", Type: "invoice.paid",
			Recipient: "u_8831", Title: "Paid", Body: "b", Payload: payload, Locale: "fr", Channels: []string{"fcm"}, TargetDevice: "dev-1", DedupeKey: "d",
			IdempotencyKey: "i", Producer: "billing", RequestedAt: 1, AcceptedAt: 2},
		&schemas.DeliveryCommand{DeliveryID: "d1", NotificationID: "n1", OccurrenceID: "o1", Tenant: "acme", Type: "t", Recipient: "u", DeviceID: "dev1",
			Channel: "webpush", Token: "tok", WebPush: sub, CollapseID: "n1", APNsID: "6ba7b810-9dad-51d1-80b4-00c04fd430c8", Topic: "UvNk2SiMZAsw",
			Title: "T", Body: "B", Payload: payload, Locale: "de", CreatedAt: 5, NotBefore: 6, ExpiresAt: 7},
		&schemas.Attempt{AttemptID: "d1/1", DeliveryID: "d1", NotificationID: "n1", Tenant: "acme", Type: "t", Recipient: "u", DeviceID: "dev1",
			Channel: "apns", Attempt: 1, Result: schemas.AttemptRetryable, Classification: "throttled", ProviderStatus: 429,
			ProviderReason: "TooManyRequests", ProviderMessageID: "m1", CollapseID: "n1", APNsID: "x", Locale: "en", LatencyMs: 12, RetryAfterMs: 1000, At: 7},
		&schemas.Outcome{DeliveryID: "d1", NotificationID: "n1", OccurrenceID: "o1", Tenant: "acme", Type: "t", Recipient: "u", DeviceID: "dev1", Channel: "fcm",
			Status: schemas.OutcomeDeadLettered, Reason: "exhausted", Attempts: 5, At: 9},
		&schemas.Device{Tenant: "acme", Recipient: "u", DeviceID: "dev1", Platform: "web", Token: "t", WebPush: sub, Locale: "en",
			TimeZone: "Europe/Paris", Enabled: true, Tags: []string{"beta", "vip"}, RetiredReason: "Unregistered",
			ReceiptTokenSHA256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", CreatedAt: 1, UpdatedAt: 2},
		&schemas.Preferences{Tenant: "acme", Recipient: "u", Channels: map[string]bool{"apns": false}, OptedOutTypes: []string{"promo"},
			QuietHours: &schemas.QuietHours{Start: "22:00", End: "07:00", TimeZone: "Europe/Paris"}, UpdatedAt: 3},
		&schemas.Segment{Tenant: "acme", Name: "beta-testers", Members: []string{"u_1", "u_2"}, UpdatedAt: 4},
		&schemas.RouteEntry{Kind: schemas.RouteDigest, Tenant: "acme", Recipient: "u", Type: "comment.added", DueAt: 10, WindowStart: 5, Count: 2,
			DigestKey: "comment.added", Items: []schemas.DigestItem{{NotificationID: "n1", RequestID: "r1", Title: "T", At: 5}},
			NotificationID: "n1", Commands: []schemas.DeliveryCommand{{DeliveryID: "d1", NotificationID: "n1", Channel: "apns", NotBefore: 10}}},
		&schemas.SinkEntry{DeliveryID: "d1", Status: schemas.SinkParked, Attempt: 2, AttemptBase: 1, NotBefore: 11, ExpiresAt: 12, Outcome: schemas.OutcomeDelivered,
			Command: &schemas.DeliveryCommand{DeliveryID: "d1", NotificationID: "n1", Channel: "apns"}, UpdatedAt: 13},
		&schemas.FeedItem{Tenant: "acme", Recipient: "u1", NotificationID: "n1", Type: "invoice.paid", Title: "Paid", Body: "b",
			Payload: json.RawMessage(`{"url":"https://example.com"}`), CreatedAt: 1, DeliveredAt: 2, ReadAt: 3},
		&schemas.Receipt{ReceiptID: "f2e2a50abd2af5c6e9e71c6fb95ee5b8", Kind: schemas.ReceiptDropped, DeliveryID: "4eb160981ce0a5e34585008dc860b5ec",
			NotificationID: "52f364d9288c640b306b566e509104bd", Tenant: "acme", Type: "invoice.paid", Recipient: "u_8831", DeviceID: "dev-1",
			Channel: "webpush", At: 5, ClientAt: 4},
		&schemas.Webhook{Tenant: "acme", ID: "wh_1", URL: "https://hooks.example/h", Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
			Events: []string{schemas.EventDeliveryFailed}, Enabled: true, DisabledReason: "gone", CreatedAt: 1, UpdatedAt: 2},
		&schemas.Completion{NotificationID: "52f364d9288c640b306b566e509104bd", OccurrenceID: "0b6f8a2d9c4e1f3a5b7d9e0c2a4f6b8d", Tenant: "acme", Type: "invoice.paid", Recipient: "u1",
			Decision: schemas.DecisionRouted, Detail: "quiet hours", DecidedAt: 3, Skipped: []string{"fcm"}, FirstAt: 4,
			Deliveries: []schemas.CompletionDelivery{{DeliveryID: "d1", Channel: "apns", DeviceID: "phone", Planned: true,
				Status: schemas.OutcomeFailed, Reason: "permanent: BadDeviceToken", Attempts: 2, At: 5}}},
		&schemas.Fallback{NotificationID: "52f364d9288c640b306b566e509104bd", OccurrenceID: "0b6f8a2d9c4e1f3a5b7d9e0c2a4f6b8d", Tenant: "acme", Type: "invoice.paid",
			Recipient: "u1", RequestID: "r1", Chain: "push > email if failed", PlannedAt: 2,
			Steps: []schemas.FallbackStep{{Channels: []string{"apns"}, Deliveries: []string{"d1"}, State: schemas.FallbackFired, At: 2},
				{Channels: []string{"email"}, AfterMs: 900000, Unless: []string{"opened"}, IfFailed: true, Deliveries: []string{"d2"},
					Commands: []schemas.DeliveryCommand{{DeliveryID: "d2", NotificationID: "n1", Channel: "email"}}, State: schemas.FallbackCancelled, At: 3, Reason: "opened"}},
			Outcomes: []schemas.FallbackOutcome{{DeliveryID: "d1", Status: schemas.OutcomeDelivered, Reason: "ok", At: 3}},
			Receipts: []schemas.FallbackReceipt{{DeliveryID: "d1", Kind: schemas.ReceiptOpened, At: 3}}, Done: true, FirstAt: 1},
		&schemas.FallbackWatermark{Marks: []schemas.FallbackMark{{Kind: schemas.MarkOutcomes, Partition: 3, Partitions: 12, At: 5},
			{Kind: schemas.MarkReceipts, Partition: 0, Partitions: 12, At: 6}}},
	}
}

func TestEveryRecordHasASampleWithEveryFieldSet(t *testing.T) {
	got := map[string]bool{}
	for _, s := range samples() {
		got[s.SchemaName()] = true
		v := reflect.ValueOf(s).Elem()
		for i := 0; i < v.NumField(); i++ {
			if name := v.Type().Field(i).Name; name != "Schema" && v.Field(i).IsZero() {
				t.Errorf("%s: sample leaves %s unset, so the round trip does not cover it", s.SchemaName(), name)
			}
		}
	}
	for _, r := range schemas.All() {
		if !got[r.SchemaName()] {
			t.Errorf("%s has no sample", r.SchemaName())
		}
	}
}

func TestRecordsRoundTripThroughTheirJSONSchema(t *testing.T) {
	for _, rec := range samples() {
		t.Run(rec.SchemaName()+" encodes, validates and decodes to itself", func(t *testing.T) {
			b, err := schemas.Encode(rec)
			if err != nil {
				t.Fatal(err)
			}
			validate(t, rec.SchemaName(), b)
			back := reflect.New(reflect.TypeOf(rec).Elem()).Interface().(schemas.Record)
			if err := schemas.Decode(b, back); err != nil {
				t.Fatal(err)
			}
			want := reflect.ValueOf(rec).Elem()
			want.FieldByName("Schema").SetString(rec.SchemaName())
			if !reflect.DeepEqual(back, rec) {
				t.Errorf("round trip changed the record:\n got %+v\nwant %+v", back, rec)
			}
		})
	}
}

func TestDecodeRejectsAnotherSchema(t *testing.T) {
	cases := []struct {
		name string
		in   string
	}{
		{"a record of another type is rejected", `{"schema":"herald.decision/v1"}`},
		{"a newer major version is rejected", `{"schema":"herald.request/v2"}`},
		{"a record without a schema is rejected", `{"type":"x"}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var r schemas.Request
			if err := schemas.Decode([]byte(c.in), &r); !errors.Is(err, schemas.ErrSchema) {
				t.Fatalf("Decode(%s) = %v, want ErrSchema", c.in, err)
			}
		})
	}
}

func TestDecodeIgnoresFieldsAddedByALaterMinorVersion(t *testing.T) {
	var r schemas.Request
	if err := schemas.Decode([]byte(`{"schema":"herald.request/v1","type":"a","futureField":1}`), &r); err != nil {
		t.Fatal(err)
	}
	if r.Type != "a" {
		t.Fatalf("type = %q", r.Type)
	}
}

func TestContentHashIgnoresPayloadKeyOrderButNotContent(t *testing.T) {
	a := schemas.Request{Type: "t", Recipient: "u", Title: "x", Payload: json.RawMessage(`{"a":1,"b":2}`)}
	b := a
	b.Payload = json.RawMessage(`{ "b":2, "a":1 }`)
	c := a
	c.Title = "y"
	d := a
	d.RequestID, d.CreatedAt, d.Producer = "other", 99, "other"
	if a.ContentHash() != b.ContentHash() {
		t.Error("payload key order changed the content hash")
	}
	if a.ContentHash() == c.ContentHash() {
		t.Error("a different title kept the content hash")
	}
	if a.ContentHash() != d.ContentHash() {
		t.Error("request id, time or producer changed the content hash")
	}
}

func TestRecipientKeys(t *testing.T) {
	cases := []struct {
		name, key, prefix string
	}{
		{"a recipient key is its own prefix", schemas.RecipientKey("acme", "u_1"), "acme/u_1"},
		{"a device key's prefix is its recipient key", schemas.DeviceKey("acme", "u_1", "d/9"), "acme/u_1"},
		{"slashes in names are escaped so they cannot shift the prefix", schemas.DeviceKey("a/b", "c/d", "e"), "a%2Fb/c%2Fd"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := schemas.RecipientPrefix(c.key); got != c.prefix {
				t.Fatalf("RecipientPrefix(%q) = %q, want %q", c.key, got, c.prefix)
			}
		})
	}
}

func TestJSONSchemaFilesMatchTheGoTypes(t *testing.T) {
	for _, r := range schemas.All() {
		t.Run(r.SchemaName()+" file is current", func(t *testing.T) {
			want, err := schemas.JSONSchema(r)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("jsonschema", schemas.JSONSchemaFile(r.SchemaName()))
			if *update {
				if err := os.WriteFile(path, want, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./schemas -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s is stale: run go test ./schemas -update", path)
			}
		})
	}
}

func validate(t *testing.T, name string, doc []byte) {
	t.Helper()
	path := filepath.Join("jsonschema", schemas.JSONSchemaFile(name))
	c := sjs.NewCompiler()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	schemaDoc, err := sjs.UnmarshalJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.AddResource(path, schemaDoc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile(path)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := sjs.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	if err := sch.Validate(inst); err != nil {
		t.Fatalf("%s does not validate against %s: %v", doc, path, err)
	}
}

func TestEveryRecordStartsWithItsSchemaField(t *testing.T) {
	for _, r := range schemas.All() {
		if f := reflect.TypeOf(r).Field(0); f.Name != "Schema" || f.Type.Kind() != reflect.String {
			t.Errorf("%s: first field is %s, Encode and Decode need Schema string first", r.SchemaName(), f.Name)
		}
	}
}

func TestOccurrenceIsTheOccurrenceIDOrTheNotificationIDOfAnOlderRecord(t *testing.T) {
	for _, c := range []struct {
		name, notification, occurrence, want string
	}{
		{"a record with an occurrence id names it", "n1", "o1", "o1"},
		{"a record written before occurrences existed names its notification id", "n1", "", "n1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := schemas.Occurrence(c.notification, c.occurrence); got != c.want {
				t.Fatalf("Occurrence(%q, %q) = %q, want %q", c.notification, c.occurrence, got, c.want)
			}
		})
	}
}
