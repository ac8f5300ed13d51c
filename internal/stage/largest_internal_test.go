package stage

import (
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestLargestBlamesTheBiggestRecordCountingItsHeaders: a batch whose
// transaction failed with MESSAGE_TOO_LARGE or a like error is isolated
// from its largest output, so the size counted must be the one Kafka
// counts, headers included, and the choice must not depend on chance.
func TestLargestBlamesTheBiggestRecordCountingItsHeaders(t *testing.T) {
	rec := func(key, value string, headers ...string) *kgo.Record {
		r := &kgo.Record{Key: []byte(key), Value: []byte(value)}
		for _, h := range headers {
			k, v, _ := strings.Cut(h, "=")
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
		}
		return r
	}
	tests := []struct {
		name string
		out  []*kgo.Record
		at   []int
		want int
	}{
		{name: "an empty record loses to a one-byte one", out: []*kgo.Record{rec("", ""), rec("", "x")}, at: []int{0, 1}, want: 1},
		{name: "keys count with values", out: []*kgo.Record{rec("", "xyz"), rec("abcd", "")}, at: []int{0, 1}, want: 1},
		{name: "headers' keys and values count", out: []*kgo.Record{rec("", "0123456789"), rec("", "", "k=01234567890123456789")}, at: []int{0, 1}, want: 1},
		{name: "of records of equal size the first is blamed", out: []*kgo.Record{rec("a", "b"), rec("c", "d"), rec("e", "f")}, at: []int{1, 2}, want: 1},
		{name: "only the records at the given indexes are compared", out: []*kgo.Record{rec("", strings.Repeat("x", 100)), rec("", "x"), rec("", "xy")}, at: []int{1, 2}, want: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := largest(tt.out, tt.at); got != tt.want {
				t.Fatalf("largest = %d, want %d", got, tt.want)
			}
		})
	}
}
