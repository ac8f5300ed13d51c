package timers_test

import (
	"testing"

	"github.com/heraldhq/herald/internal/timers"
)

func due(q *timers.Queue, clock int64) []timers.Timer {
	var got []timers.Timer
	for it, ok := q.Due(clock); ok; it, ok = q.Due(clock) {
		got = append(got, it)
	}
	return got
}

func TestQueue(t *testing.T) {
	t.Run("timers come due in time order, then key order, and not before their time", func(t *testing.T) {
		var q timers.Queue
		q.Add("b", 20)
		q.Add("c", 10)
		q.Add("a", 20)
		q.Add("d", 30)
		got := due(&q, 20)
		want := []timers.Timer{{"c", 10}, {"a", 20}, {"b", 20}}
		if len(got) != len(want) {
			t.Fatalf("due at 20: %v, want %v", got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("due at 20: %v, want %v", got, want)
			}
		}
		if q.Len() != 1 {
			t.Fatalf("%d timers left, want 1", q.Len())
		}
	})
	t.Run("an aborted transaction's due timers come due again in the next", func(t *testing.T) {
		var q timers.Queue
		q.Add("a", 10)
		q.Add("b", 50)
		if got := due(&q, 10); len(got) != 1 {
			t.Fatalf("due: %v", got)
		}
		q.Abort()
		if got := due(&q, 10); len(got) != 1 || got[0].Key != "a" {
			t.Fatalf("after the abort, due: %v, want a again", got)
		}
	})
	t.Run("a committed transaction's due timers are gone", func(t *testing.T) {
		var q timers.Queue
		q.Add("a", 10)
		due(&q, 10)
		q.Commit()
		q.Abort() // the next transaction aborts: nothing of the committed one returns
		if got := due(&q, 100); len(got) != 0 {
			t.Fatalf("after commit and an empty abort, due: %v, want none", got)
		}
	})
}
