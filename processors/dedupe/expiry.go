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

// queue is a binary min-heap, without the boxing of container/heap.
type queue[T timed[T]] []T

func (q *queue[T]) push(it T) {
	h := append(*q, it)
	i := len(h) - 1
	for i > 0 {
		parent := (i - 1) / 2
		if !h[i].before(h[parent]) {
			break
		}
		h[parent], h[i] = h[i], h[parent]
		i = parent
	}
	*q = h
}

// due reports whether the first item expires at or before now.
func (q queue[T]) due(now int64) bool { return len(q) > 0 && q[0].when() <= now }

func (q *queue[T]) pop() T {
	h := *q
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
	*q = h
	return top
}
