package reply

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestARecordAsksForAPartitionThatExists(t *testing.T) {
	for _, c := range []struct {
		name   string
		header []kgo.RecordHeader
		n      int32
		want   int32
		ok     bool
	}{
		{"a record without the header asks for nothing", nil, 16, 0, false},
		{"a partition below the count is asked for", AppendHeader(nil, 3), 16, 3, true},
		{"the last partition is asked for", AppendHeader(nil, 15), 16, 15, true},
		{"a partition at the count is not: it does not exist", AppendHeader(nil, 16), 16, 0, false},
		{"a negative partition is not", []kgo.RecordHeader{{Key: Header, Value: []byte("-1")}}, 16, 0, false},
		{"a header that is no number is not", []kgo.RecordHeader{{Key: Header, Value: []byte("three")}}, 16, 0, false},
		{"a partition beside other headers is found", AppendHeader([]kgo.RecordHeader{{Key: "herald-schema", Value: []byte("x")}}, 7), 8, 7, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, ok := Partition(&kgo.Record{Headers: c.header}, c.n)
			if ok != c.ok || (ok && p != c.want) {
				t.Fatalf("Partition = %d, %v; want %d, %v", p, ok, c.want, c.ok)
			}
		})
	}
}

func TestAppendHeaderLeavesTheSharedHeadersAlone(t *testing.T) {
	shared := make([]kgo.RecordHeader, 1, 4) // room to append in place
	shared[0] = kgo.RecordHeader{Key: "herald-schema", Value: []byte("herald.accepted/v2")}
	a := AppendHeader(shared, 1)
	b := AppendHeader(shared, 2)
	if pa, _ := FromHeaders(a); pa != 1 {
		t.Fatalf("the first copy asks for %d, want 1 (the second append overwrote it)", pa)
	}
	if pb, _ := FromHeaders(b); pb != 2 || len(shared) != 1 {
		t.Fatalf("second copy %d, shared headers %d; want 2 and 1 header", pb, len(shared))
	}
}

func TestAReplyIsTheDecisionOnTheAskedPartition(t *testing.T) {
	d := &kgo.Record{Topic: "herald.decisions", Partition: 9, Offset: 4, Key: []byte("k"), Value: []byte("v"),
		Headers: []kgo.RecordHeader{{Key: "herald-schema", Value: []byte("herald.decision/v2")}}}
	r := Of(d, "herald.replies", 2)
	if r.Topic != "herald.replies" || r.Partition != 2 || string(r.Key) != "k" || string(r.Value) != "v" || len(r.Headers) != 1 || r.Offset != 0 {
		t.Fatalf("reply %+v", r)
	}
}

func TestAnInstanceKeepsItsPartition(t *testing.T) {
	if For("api-1", 16) != For("api-1", 16) {
		t.Fatal("one instance id maps to two partitions")
	}
	seen := map[int32]bool{}
	for _, id := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		p := For(id, 4)
		if p < 0 || p >= 4 {
			t.Fatalf("For(%q, 4) = %d, outside the topic", id, p)
		}
		seen[p] = true
	}
	if len(seen) < 2 {
		t.Fatalf("eight instance ids share %d partition of four", len(seen))
	}
	if For("x", 0) != 0 {
		t.Fatal("no partitions: want 0")
	}
}
