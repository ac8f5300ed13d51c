package dedupe

// Expiry queues. An entry set in the open transaction is queued by key
// (expiryItem), as it has no position yet; a committed entry by its
// position in its table (posItem, 12 bytes). An item is never updated or
// removed: one whose entry has since been replaced, deleted or moved out
// of its position is stale, and Task.expire skips it by comparing the
// item's time with the entry's expiry. A position reused by another key
// with the same expiry is expired at that time, which is that key's own.

// expiryItem is an expiry queued by key.
type expiryItem struct {
	at  int64
	key seenKey
}

func (a expiryItem) before(b expiryItem) bool { return a.at < b.at }

func (a expiryItem) when() int64 { return a.at }

// posItem is an expiry queued by position: the time in two halves, so
// the item is 12 bytes, not 16.
type posItem struct {
	lo, hi uint32
	pos    uint32
}

func newPosItem(at int64, pos uint32) posItem {
	return posItem{lo: uint32(at), hi: uint32(uint64(at) >> 32), pos: pos}
}

func (a posItem) when() int64 { return int64(uint64(a.hi)<<32 | uint64(a.lo)) }

// before orders by time, then by position, so the order of tombstones
// with one expiry is fixed by the positions, which commits assign in the
// order of the transaction's changes.
func (a posItem) before(b posItem) bool {
	return a.when() < b.when() || a.when() == b.when() && a.pos < b.pos
}

// timed is an item of a queue.
type timed[T any] interface {
	before(T) bool
	when() int64
}

// queue is a priority queue of expiries, earliest first (by before): a
// run of items pushed in order (each no earlier than the run's last) and
// a binary min-heap, without container/heap's boxing, of the others. An
// expiry is its key's time plus a window, and stream time moves forward,
// so in a stage's steady state nearly every push appends to the run and
// nearly every pop takes the run's first item: constant time, where a
// heap of the whole seen-set's expiries sifts through about twenty levels
// scattered over its memory on every pop. pop takes the earlier of the
// two first items, so items leave in the order a single heap would give
// them; of two items neither before the other, the run's goes first.
type queue[T timed[T]] struct {
	run  []T // run[head:] is queued, in order
	head int
	heap []T
}

// runCompactAt is how many popped items the run's slice keeps at its
// front, at least, before the queued ones are moved down over them.
const runCompactAt = 1024

func (q *queue[T]) len() int { return len(q.run) - q.head + len(q.heap) }

// reset empties the queue, keeping its room.
func (q *queue[T]) reset() { q.run, q.head, q.heap = q.run[:0], 0, q.heap[:0] }

func (q *queue[T]) push(it T) {
	if n := len(q.run); n == q.head || !it.before(q.run[n-1]) {
		q.run = append(q.run, it)
		return
	}
	h := append(q.heap, it)
	i := len(h) - 1
	for i > 0 {
		parent := (i - 1) / 2
		if !h[i].before(h[parent]) {
			break
		}
		h[parent], h[i] = h[i], h[parent]
		i = parent
	}
	q.heap = h
}

// fromRun reports whether the first item is the run's: the heap is
// empty, or its first item is not before the run's. The queue must not be
// empty, and then the run is not: an item goes to the heap only when it
// is before the run's last item, which so leaves the queue after it.
func (q *queue[T]) fromRun() bool {
	return len(q.heap) == 0 || !q.heap[0].before(q.run[q.head])
}

// first is the earliest item; the queue must not be empty.
func (q *queue[T]) first() T {
	if q.fromRun() {
		return q.run[q.head]
	}
	return q.heap[0]
}

// due reports whether the first item expires at or before now.
func (q *queue[T]) due(now int64) bool { return q.len() > 0 && q.first().when() <= now }

// pop removes and returns the first item; the queue must not be empty.
func (q *queue[T]) pop() T {
	if q.fromRun() {
		top := q.run[q.head]
		q.head++
		if q.head == len(q.run) {
			q.run, q.head = q.run[:0], 0
		} else if q.head >= runCompactAt && q.head*2 >= len(q.run) {
			n := copy(q.run, q.run[q.head:])
			q.run, q.head = q.run[:n], 0
		}
		return top
	}
	h := q.heap
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	i := 0
	for {
		least, l, r := i, 2*i+1, 2*i+2
		if l < len(h) && h[l].before(h[least]) {
			least = l
		}
		if r < len(h) && h[r].before(h[least]) {
			least = r
		}
		if least == i {
			break
		}
		h[i], h[least] = h[least], h[i]
		i = least
	}
	q.heap = h
	return top
}
