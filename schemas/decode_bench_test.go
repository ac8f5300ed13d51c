package schemas_test

import (
	"testing"

	"github.com/heraldhq/herald/schemas"
)

// BenchmarkDecodeDecision reads a dedupe stage's decision as the API's
// read model and its live waiters do, with Decode and with a Decoder
// (whose fast path reads the canonical encoding without Decode's validity
// passes), side by side.
//
//	go test -run '^$' -bench DecodeDecision -benchmem ./schemas
func BenchmarkDecodeDecision(b *testing.B) {
	doc, err := schemas.Encode(&schemas.Decision{DecisionID: "dedupe/herald.requests/3/1234567", Stage: "dedupe", Outcome: "accepted",
		RequestID: "5f0c6a2e9b1d4c7e8a3f2b1c0d9e8f7a", Tenant: "acme", Type: "invoice.paid", Recipient: "user-42",
		NotificationID: "0b8e2c4d6f8a0c2e4a6c8e0a2c4e6a8c", DedupeKey: "inv_1001", IdempotencyKey: "evt_1001", Producer: "billing",
		At: 1_764_650_000_000, SourceTopic: "herald.requests", SourcePartition: 3, SourceOffset: 1234567})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("Decode", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			var d schemas.Decision
			if err := schemas.Decode(doc, &d); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Decoder", func(b *testing.B) {
		b.ReportAllocs()
		var dec schemas.Decoder
		for range b.N {
			var d schemas.Decision
			if err := dec.Decode(doc, &d); err != nil {
				b.Fatal(err)
			}
		}
	})
}
