// Package timers owns a stage task's keyed timers: a queue ordered by due
// time (then key, so firing order is deterministic) that takes part in the
// task's transaction. A timer popped as due in a transaction is re-queued
// if the transaction aborts, so a step whose output was never committed
// fires again in the next one; once the transaction commits it is gone.
//
// A timer names a key and a time only. The queue does not know whether the
// key's state still wants that time: a timer may be stale (its entry was
// replaced, moved or deleted after it was queued), and the task must check
// the entry when the timer comes due and skip a stale one. That way
// replacing an entry never has to search the queue.
package timers

import "container/heap"

// Timer is a key due at At (milliseconds, the task's clock).
type Timer struct {
	Key string
	At  int64
}

// Queue is the timers of one task. The zero value is empty and ready.
type Queue struct {
	h      timerHeap
	popped []Timer // popped in the open transaction, re-queued by Abort
}

// Add queues key at at.
func (q *Queue) Add(key string, at int64) { heap.Push(&q.h, Timer{Key: key, At: at}) }

// Len is the number of timers queued.
func (q *Queue) Len() int { return len(q.h) }

// Due pops the earliest timer due at or before clock, if any, and keeps
// it until the transaction ends.
func (q *Queue) Due(clock int64) (Timer, bool) {
	if len(q.h) == 0 || q.h[0].At > clock {
		return Timer{}, false
	}
	it := heap.Pop(&q.h).(Timer)
	q.popped = append(q.popped, it)
	return it, true
}

// Commit forgets the timers popped in the transaction.
func (q *Queue) Commit() { q.popped = q.popped[:0] }

// Abort re-queues the timers popped in the transaction.
func (q *Queue) Abort() {
	for _, it := range q.popped {
		heap.Push(&q.h, it)
	}
	q.popped = q.popped[:0]
}

type timerHeap []Timer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	return h[i].At < h[j].At || h[i].At == h[j].At && h[i].Key < h[j].Key
}
func (h timerHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)   { *h = append(*h, x.(Timer)) }
func (h *timerHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}
