package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/processors/dedupe"
	"github.com/heraldhq/herald/schemas"
)

func TestDecodeSeenPrintsEitherVersionAsJSON(t *testing.T) {
	e := schemas.SeenEntry{Kind: schemas.SeenDedupe, Scope: "0123456789abcdef0123456789abcdef", NotificationID: "fedcba9876543210fedcba9876543210",
		RequestID: "call #1", Outcome: schemas.DecisionAccepted, FirstAt: 1_764_500_000_000, ExpiresAt: 1_764_500_600_000, SourcePartition: 2, SourceOffset: 41}
	v2, err := schemas.AppendSeenV2(nil, &e)
	if err != nil {
		t.Fatal(err)
	}
	v1, err := schemas.Encode(&e)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, schema string
		value        []byte
	}{{"a herald.seen/v2 value is printed with its ids in hex", schemas.SeenEntryV2, v2}, {"a JSON value is printed as it reads", schemas.SeenEntryV1, v1}} {
		t.Run(c.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "value")
			if err := os.WriteFile(file, c.value, 0o600); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := runDecode(t.Context(), []string{"seen", "--file", file}, &out); err != nil {
				t.Fatal(err)
			}
			var got schemas.SeenEntry
			if err := json.Unmarshal(out.Bytes(), &got); err != nil {
				t.Fatalf("%v in %s", err, out.String())
			}
			want := e
			want.Schema = c.schema
			if got != want {
				t.Fatalf("printed %+v, want %+v", got, want)
			}
		})
	}
}

func TestDecodePrintsEitherVersionOfTheStagesRecordsAsJSON(t *testing.T) {
	records := []schemas.Record{
		&schemas.Request{RequestID: "call #1", Tenant: "acme", Type: "invoice.paid", Recipient: "u1", NotificationID: "fedcba9876543210fedcba9876543210",
			Title: "Paid", Payload: json.RawMessage(`{"amount":12}`), Channels: []string{"apns"}, CreatedAt: 1_764_500_000_000},
		&schemas.Decision{DecisionID: "dedupe/herald.requests/2/41", Stage: "dedupe", Outcome: schemas.DecisionAccepted, RequestID: "call #1",
			NotificationID: "fedcba9876543210fedcba9876543210", At: 1_764_500_000_000, SourcePartition: 2, SourceOffset: 41},
		&schemas.Accepted{NotificationID: "fedcba9876543210fedcba9876543210", Title: "Paid", Payload: json.RawMessage(`{"amount":12}`), AcceptedAt: 1_764_500_000_000},
	}
	names := []string{"request", "decision", "accepted"}
	for i, r := range records {
		for _, format := range []schemas.Format{schemas.FormatBinary, schemas.FormatJSON} {
			schema := map[string]string{"request": format.RequestSchema(), "decision": format.DecisionSchema(), "accepted": format.AcceptedSchema()}[names[i]]
			t.Run("a "+schema+" value is printed as JSON naming its version", func(t *testing.T) {
				reflect.ValueOf(r).Elem().Field(0).SetString(schema)
				value, err := schemas.Encode(r)
				if err != nil {
					t.Fatal(err)
				}
				file := filepath.Join(t.TempDir(), "value")
				if err := os.WriteFile(file, value, 0o600); err != nil {
					t.Fatal(err)
				}
				var out bytes.Buffer
				if err := runDecode(t.Context(), []string{names[i], "--file", file}, &out); err != nil {
					t.Fatal(err)
				}
				got := reflect.New(reflect.TypeOf(r).Elem()).Interface()
				if err := json.Unmarshal(out.Bytes(), got); err != nil {
					t.Fatalf("%v in %s", err, out.String())
				}
				// Compared as encoding/json writes them, which compacts
				// the payload printed indented.
				gotJSON, _ := json.Marshal(got)
				wantJSON, _ := json.Marshal(r)
				if !bytes.Equal(gotJSON, wantJSON) {
					t.Fatalf("printed %s, want %s", gotJSON, wantJSON)
				}
			})
		}
	}
}

func TestDecodeSeenUsageErrors(t *testing.T) {
	garbage := filepath.Join(t.TempDir(), "garbage")
	if err := os.WriteFile(garbage, []byte{0x08, 0x05}, 0o600); err != nil {
		t.Fatal(err)
	}
	// A tag without its field: no message of any schema.
	truncated := filepath.Join(t.TempDir(), "truncated")
	if err := os.WriteFile(truncated, []byte{0x12, 0x05}, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"no record is named", nil, "want 'herald decode seen|seen-batch|request|decision|accepted'"},
		{"a record without a binary version is refused by name", []string{"outcome"}, `got "outcome"`},
		{"a value that is not a seen entry is named by its size", []string{"seen", "--file", garbage}, "2 bytes are not a herald.seen value"},
		{"a value that is not a decision is named by its size", []string{"decision", "--file", truncated}, "2 bytes are not a herald.decisions value"},
		{"a stray argument is refused", []string{"seen", "--file", garbage, "extra"}, `unexpected argument "extra"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := runDecode(t.Context(), c.args, new(bytes.Buffer))
			if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want a usage error containing %q", err, c.want)
			}
		})
	}
	t.Run("a missing file is named", func(t *testing.T) {
		err := runDecode(t.Context(), []string{"seen", "--file", filepath.Join(t.TempDir(), "none")}, new(bytes.Buffer))
		if err == nil || !strings.Contains(err.Error(), "read --file") {
			t.Fatalf("error %v", err)
		}
	})
}

func TestDecodeSeenBatchPrintsABucketRecordsTimesAndEntries(t *testing.T) {
	task := dedupe.NewTask(dedupe.Policy{DefaultWindowMs: 60_000, IdempotencyTTLMs: 60_000}, dedupe.Topics{Requests: "requests", Decisions: "decisions", Seen: "seen", Accepted: "accepted"}, 0)
	r := schemas.Request{Tenant: "acme", Type: "invoice.paid", Recipient: "u1", Title: "Paid", DedupeKey: "inv_1", IDSource: "dedupe_key", RequestID: "call #1"}
	r.NotificationID = identity.DedupeID(r.Tenant, r.Type, r.Recipient, r.DedupeKey)
	v, err := schemas.Encode(&r)
	if err != nil {
		t.Fatal(err)
	}
	var out stage.Out
	if err := task.Process(&kgo.Record{Topic: "requests", Value: v, Offset: 41, Timestamp: time.UnixMilli(1_764_500_000_000)}, &out); err != nil {
		t.Fatal(err)
	}
	task.Tick(&out)
	var value []byte
	for _, rec := range out.Records() {
		if rec.Topic == "seen" {
			value = rec.Value
		}
	}
	file := filepath.Join(t.TempDir(), "value")
	if err := os.WriteFile(file, value, 0o600); err != nil {
		t.Fatal(err)
	}
	var printed bytes.Buffer
	if err := runDecode(t.Context(), []string{"seen-batch", "--file", file}, &printed); err != nil {
		t.Fatal(err)
	}
	var got dedupe.SeenBatch
	if err := json.Unmarshal(printed.Bytes(), &got); err != nil {
		t.Fatalf("%v in %s", err, printed.String())
	}
	want := schemas.SeenEntry{Schema: schemas.SeenEntryV2, Kind: schemas.SeenDedupe, Scope: r.NotificationID, NotificationID: r.NotificationID,
		RequestID: "call #1", Outcome: schemas.DecisionAccepted, FirstAt: 1_764_500_000_000, ExpiresAt: 1_764_500_060_000, SourceOffset: 41}
	if got.Schema != dedupe.SeenBatchV3 || got.StreamTime != 1_764_500_000_000 || len(got.Entries) != 1 || got.Entries[0] != want {
		t.Fatalf("printed %+v, want stream time 1764500000000 and the entry %+v", got, want)
	}
	var usage bytes.Buffer
	if err := runDecode(t.Context(), []string{"seen-batch", "--file", filepath.Join(t.TempDir(), "none")}, &usage); err == nil {
		t.Fatal("no error for a missing file")
	}
}
