package identity

import (
	"encoding/hex"
	"strings"
	"testing"
)

func TestSumsAreTheBytesOfTheDerivedIDs(t *testing.T) {
	long := strings.Repeat("k", 300) // a preimage beyond the stack buffer
	cases := []struct {
		name string
		sum  [IDLen / 2]byte
		id   string
	}{
		{"a dedupe sum is the dedupe id's bytes", DedupeSum("acme", "invoice.paid", "u_8831", "dk-1"), DedupeID("acme", "invoice.paid", "u_8831", "dk-1")},
		{"a dedupe sum of key parts is the id of the joined key", DedupeSum("acme", "t", "r", "herald:id:", "52f364d9288c640b306b566e509104bd"),
			DedupeID("acme", "t", "r", "herald:id:52f364d9288c640b306b566e509104bd")},
		{"a dedupe sum of no key parts is the id of the empty key", DedupeSum("", "", ""), DedupeID("", "", "", "")},
		{"a dedupe sum of a long key is its id", DedupeSum("a", "t", "r", long), DedupeID("a", "t", "r", long)},
		{"an idempotency sum is the idempotency id's bytes", IdempotencySum("acme", "invoice.paid", "u_8831", "ik-1"), IdempotencyID("acme", "invoice.paid", "u_8831", "ik-1")},
		{"an idempotency sum of a long key is its id", IdempotencySum("a", "t", "r", long), IdempotencyID("a", "t", "r", long)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := hex.EncodeToString(c.sum[:]); got != c.id {
				t.Fatalf("sum %s, want %s", got, c.id)
			}
		})
	}
	t.Run("key parts split at another place give the same sum", func(t *testing.T) {
		if DedupeSum("a", "t", "r", "ab", "c") != DedupeSum("a", "t", "r", "a", "bc") {
			t.Fatal("the split of the key changed the sum")
		}
	})
}

func TestParseIDReadsValidIDsOnly(t *testing.T) {
	for _, id := range []string{"52f364d9288c640b306b566e509104bd", "00000000000000000000000000000000", "ffffffffffffffffffffffffffffffff", "0123456789abcdef0123456789abcdef"} {
		t.Run("reads "+id, func(t *testing.T) {
			sum, ok := ParseID(id)
			if !ok || hex.EncodeToString(sum[:]) != id {
				t.Fatalf("ParseID(%q) = %x, %v", id, sum, ok)
			}
		})
	}
	for _, id := range []string{"52F364D9288C640B306B566E509104BD", "52f364d9288c640b306b566e509104b", "52f364d9288c640b306b566e509104bg", ""} {
		t.Run("refuses "+id, func(t *testing.T) {
			if _, ok := ParseID(id); ok {
				t.Fatalf("ParseID(%q) accepted it", id)
			}
		})
	}
}

func TestAppendOccurrenceIDAppendsTheOccurrenceID(t *testing.T) {
	long := strings.Repeat("n", 300) // a preimage beyond the stack buffer
	for _, c := range []struct {
		name, notification string
		at                 int64
	}{
		{"an id and a time append the occurrence id", "52f364d9288c640b306b566e509104bd", 1764547200000},
		{"a negative time appends the occurrence id", "52f364d9288c640b306b566e509104bd", -1},
		{"a long notification id appends the occurrence id", long, 7},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := string(AppendOccurrenceID([]byte("prefix:"), c.notification, c.at))
			if want := "prefix:" + OccurrenceID(c.notification, c.at); got != want {
				t.Fatalf("appended %q, want %q", got, want)
			}
		})
	}
}

func TestSumsAndParseIDDoNotAllocate(t *testing.T) {
	buf := make([]byte, 0, IDLen)
	n := testing.AllocsPerRun(100, func() {
		_ = AppendOccurrenceID(buf[:0], "52f364d9288c640b306b566e509104bd", 1764547200000)
		_ = DedupeSum("acme", "invoice.paid", "u_8831", "herald:id:", "52f364d9288c640b306b566e509104bd")
		_ = IdempotencySum("acme", "invoice.paid", "u_8831", "ik-1")
		_, _ = ParseID("52f364d9288c640b306b566e509104bd")
	})
	if n != 0 {
		t.Fatalf("%v allocations per run, want 0", n)
	}
}

func BenchmarkDedupeSum(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = DedupeSum("acme", "invoice.paid", "u_8831", "order-1234")
	}
}

func BenchmarkDedupeID(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = DedupeID("acme", "invoice.paid", "u_8831", "order-1234")
	}
}

func TestParseIDAcceptsExactlyTheLowerCaseHexDigitsAtEveryPosition(t *testing.T) {
	const base = "52f364d9288c640b306b566e509104bd"
	for pos := range IDLen {
		for c := range 256 {
			id := base[:pos] + string([]byte{byte(c)}) + base[pos+1:]
			want := strings.IndexByte("0123456789abcdef", byte(c)) >= 0
			sum, ok := ParseID(id)
			if ok != want || Valid(id) != want {
				t.Fatalf("byte %q at %d: ParseID ok = %v, Valid = %v, want %v", byte(c), pos, ok, Valid(id), want)
			}
			if ok {
				if got := hex.EncodeToString(sum[:]); got != id {
					t.Fatalf("ParseID(%q) = %s", id, got)
				}
			} else if sum != [IDLen / 2]byte{} {
				t.Fatalf("ParseID(%q) refused it but returned %x, want zero bytes", id, sum)
			}
		}
	}
}

// BenchmarkParseID reads ids of random digits, as notification and request
// ids are.
//
//	go test -run '^$' -bench ParseID -benchmem ./identity
func BenchmarkParseID(b *testing.B) {
	ids := make([]string, 1024)
	for i := range ids {
		ids[i] = DedupeID("acme", "t", "r", strings.Repeat("k", i))
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, ok := ParseID(ids[i%len(ids)]); !ok {
			b.Fatal("refused a valid id")
		}
		i++
	}
}
