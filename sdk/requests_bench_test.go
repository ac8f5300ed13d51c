package sdk

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkRequests measures Notification.Requests, one send's requests,
// for one and for 100 recipients of a notification whose key makes the id.
//
//	go test -run '^$' -bench Requests -benchmem ./sdk
func BenchmarkRequests(b *testing.B) {
	n := Notification{Type: "invoice.paid", Title: "t", Body: "b", Key: Key{"invoice": String("inv_2201"), "n": Number(123456)}}
	o := RequestOptions{Tenant: "acme", RequestID: "0123456789abcdef0123456789abcdef", Now: time.UnixMilli(1_700_000_000_000)}
	for _, count := range []int{1, 100} {
		recipients := make([]string, count)
		for i := range recipients {
			recipients[i] = fmt.Sprintf("u_%d", i)
		}
		b.Run(fmt.Sprintf("recipients=%d", count), func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if _, err := n.Requests(recipients, o); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
