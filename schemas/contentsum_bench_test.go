package schemas_test

import (
	"encoding/json"
	"testing"

	"github.com/heraldhq/herald/schemas"
)

// BenchmarkContentSum: the content hash of a request with an idempotency
// key, without and with a payload (the dedupe stage computes it for every
// request with an idempotency key).
//
//	go test -run '^$' -bench ContentSum -benchmem ./schemas
func BenchmarkContentSum(b *testing.B) {
	base := schemas.Request{Type: "invoice.paid", Recipient: "user-42", Title: "Invoice paid", Body: "Your invoice inv-1 was paid",
		Channels: []string{"apns", "feed"}, IdempotencyKey: "k-1"}
	withPayload := base
	withPayload.Payload = json.RawMessage(`{"invoice":"inv-1","amount":1200,"currency":"EUR","lines":[{"sku":"a-1","qty":2},{"sku":"b-7","qty":1}]}`)
	for _, c := range []struct {
		name string
		r    schemas.Request
	}{{"payload=none", base}, {"payload=object", withPayload}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				_ = c.r.ContentSum()
			}
		})
	}
}
