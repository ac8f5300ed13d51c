package dedupe

import (
	"encoding/binary"
	"math/bits"
)

// The committed seen-set of one kind of key, packed.
//
// An entry is 64 bytes with no pointers (packed): the key's id and the
// original's notification and request ids (16 bytes each), its first time
// (48 bits of milliseconds), its window (32 bits: expiry − first time),
// its source offset (40 bits) and a byte of outcome and flags. The source
// partition is the table's own (the task's). The idempotency table keeps
// the 16 bytes of content hash beside each entry; the dedupe table does
// not, as no lookup of a dedupe key compares content. Entries sit in
// chunks of chunkLen, so the table grows by a chunk, not by a copy of
// everything with spare room. An entry whose fields do not fit (a time
// before 1970 or past 48 bits, a window past 49 days, another partition, a
// field kept as a string: see seenStrings) is kept whole on the side
// (side) and its packed entry only marks it.
//
// The index is open addressing with linear probing over uint32 slots, at
// most three quarters full: a slot holds the entry's position + 1 in its
// low `bits` bits and, above them, bits of the key's hash, so a probe
// reads an entry only when those agree (one read in 2^(32−bits) of the
// others). A deleted key's slot is refilled by moving later slots of its
// run back (no markers of deletion), and its position is reused by the
// next key set. Positions are below three quarters of the index's size,
// as the index grows before the live keys pass that and never shrinks.
//
// What a key costs, then: 64 bytes (80 for an idempotency key), 5.3 to
// 10.7 bytes of index, and the 12-byte expiry item the Task queues.

const (
	chunkBits = 12
	chunkLen  = 1 << chunkBits
	minBits   = 3 // the smallest index: 8 slots
)

// packed bits: the outcome code in the low two, then flags.
const (
	packedOutcome = 3
	packedLive    = 1 << 2 // the position holds a key
	packedContent = 1 << 3 // the content hash beside it is the entry's
	packedSide    = 1 << 4 // the entry is kept whole in side
	packedPerKey  = 1 << 5 // flagPerKey
)

// Every outcome code fits packedOutcome (a compile error otherwise).
const _ = packedOutcome - outcomeOther

// limits of the packed fields.
const (
	maxFirstAt = 1<<48 - 1
	maxWindow  = 1<<32 - 1
	maxOffset  = 1<<40 - 1
)

// packed is one committed entry, without pointers.
type packed struct {
	id           [16]byte
	notification [16]byte
	request      [16]byte
	firstAt      [6]byte
	window       [4]byte
	offset       [5]byte
	bits         uint8
}

// sideEntry is an entry kept whole.
type sideEntry struct {
	val  seenVal
	strs seenStrings
}

// seenTable is the committed seen-set of one kind of key.
type seenTable struct {
	partition int32 // the task's: an entry from another is kept on the side
	sums      bool  // keeps content hashes (the idempotency kind)

	index []uint32
	bits  uint // len(index) is 1 << bits
	live  int

	entries  []*[chunkLen]packed
	contents []*[chunkLen][16]byte // when sums
	used     uint32                // positions handed out
	free     []uint32              // positions of deleted entries

	side map[[16]byte]sideEntry
}

func newSeenTable(partition int32, sums bool) *seenTable {
	return &seenTable{partition: partition, sums: sums, index: make([]uint32, 1<<minBits), bits: minBits,
		side: map[[16]byte]sideEntry{}}
}

func (s *seenTable) len() int { return s.live }

func (s *seenTable) at(pos uint32) *packed { return &s.entries[pos>>chunkBits][pos&(chunkLen-1)] }

// hashID mixes an id's 16 bytes into 64 bits (the splitmix64 finalizer):
// the top bits choose the home slot, the low 32 the slot's tag.
func hashID(id *[16]byte) uint64 {
	h := binary.LittleEndian.Uint64(id[:8]) ^ bits.RotateLeft64(binary.LittleEndian.Uint64(id[8:]), 32)
	h = (h ^ h>>30) * 0xbf58476d1ce4e5b9
	h = (h ^ h>>27) * 0x94d049bb133111eb
	return h ^ h>>31
}

// low is the mask of a slot's position bits.
func (s *seenTable) low() uint32 { return uint32(1<<s.bits - 1) }

func (s *seenTable) home(h uint64) uint64 { return h >> (64 - s.bits) }

// slotValue is the index slot of the entry at pos whose id hashes to h:
// the position plus one (zero is an empty slot) and, above it, the hash's
// tag bits.
func (s *seenTable) slotValue(h uint64, pos uint32) uint32 { return uint32(h)&^s.low() | (pos + 1) }

// find returns the slot of id and its position, or the empty slot where
// it would go; h is hashID(id).
func (s *seenTable) find(id *[16]byte, h uint64) (slot uint64, pos uint32, ok bool) {
	low := s.low()
	tag := uint32(h) &^ low
	mask := uint64(len(s.index) - 1)
	for slot = s.home(h); ; slot = (slot + 1) & mask {
		v := s.index[slot]
		if v == 0 {
			return slot, 0, false
		}
		if v&^low == tag && s.at(v&low-1).id == *id {
			return slot, v&low - 1, true
		}
	}
}

// get returns the entry under id.
func (s *seenTable) get(id *[16]byte) (seenVal, seenStrings, bool) {
	_, pos, ok := s.find(id, hashID(id))
	if !ok {
		return seenVal{}, seenStrings{}, false
	}
	v, strs := s.entry(pos)
	return v, strs, true
}

// entry unpacks the entry at pos.
func (s *seenTable) entry(pos uint32) (seenVal, seenStrings) {
	p := s.at(pos)
	if p.bits&packedSide != 0 {
		e := s.side[p.id]
		return e.val, e.strs
	}
	v := seenVal{notification: p.notification, request: p.request, partition: s.partition, outcome: p.bits & packedOutcome,
		firstAt: int64(getUint(p.firstAt[:])), offset: int64(getUint(p.offset[:]))}
	v.expiresAt = v.firstAt + int64(getUint(p.window[:]))
	if p.bits&packedContent != 0 {
		v.content = s.contents[pos>>chunkBits][pos&(chunkLen-1)]
		v.flags |= flagContent
	}
	if p.bits&packedPerKey != 0 {
		v.flags |= flagPerKey
	}
	return v, seenStrings{}
}

// set sets the entry under id and returns its position.
func (s *seenTable) set(id *[16]byte, v seenVal, strs seenStrings) uint32 {
	h := hashID(id)
	slot, pos, ok := s.find(id, h)
	if !ok {
		if (s.live+1)*4 > len(s.index)*3 {
			s.grow()
			slot, _, _ = s.find(id, h)
		}
		pos = s.alloc()
		s.index[slot] = s.slotValue(h, pos)
		s.live++
	} else if s.at(pos).bits&packedSide != 0 {
		delete(s.side, *id)
	}
	s.write(pos, id, v, strs)
	return pos
}

// write stores the entry at pos.
func (s *seenTable) write(pos uint32, id *[16]byte, v seenVal, strs seenStrings) {
	p := s.at(pos)
	window := v.expiresAt - v.firstAt
	// The outcome codes (outcomeAccepted, outcomeDuplicate, outcomeOther)
	// fit packedOutcome's two bits.
	if v.flags&flagStrings != 0 || v.partition != s.partition ||
		v.firstAt < 0 || v.firstAt > maxFirstAt || window < 0 || window > maxWindow || v.offset < 0 || v.offset > maxOffset {
		*p = packed{id: *id, bits: packedLive | packedSide}
		s.side[*id] = sideEntry{val: v, strs: strs}
		return
	}
	*p = packed{id: *id, notification: v.notification, request: v.request, bits: packedLive | v.outcome}
	if v.flags&flagPerKey != 0 {
		p.bits |= packedPerKey
	}
	putUint(p.firstAt[:], uint64(v.firstAt))
	putUint(p.window[:], uint64(window))
	putUint(p.offset[:], uint64(v.offset))
	if s.sums && v.flags&flagContent != 0 {
		p.bits |= packedContent
		s.contents[pos>>chunkBits][pos&(chunkLen-1)] = v.content
	}
}

// alloc returns a free position, reusing a deleted entry's first.
func (s *seenTable) alloc() uint32 {
	if n := len(s.free); n > 0 {
		pos := s.free[n-1]
		s.free = s.free[:n-1]
		return pos
	}
	pos := s.used
	s.used++
	if int(pos>>chunkBits) == len(s.entries) {
		s.entries = append(s.entries, new([chunkLen]packed))
		if s.sums {
			s.contents = append(s.contents, new([chunkLen][16]byte))
		}
	}
	return pos
}

// delete removes the entry under id, if any.
func (s *seenTable) delete(id *[16]byte) {
	slot, pos, ok := s.find(id, hashID(id))
	if !ok {
		return
	}
	p := s.at(pos)
	if p.bits&packedSide != 0 {
		delete(s.side, *id)
	}
	p.bits = 0
	s.free = append(s.free, pos)
	s.live--
	// Close the gap: a later slot of the run moves back into it when its
	// home is at or before the gap (its probe distance covers the gap).
	mask := uint64(len(s.index) - 1)
	low := s.low()
	gap := slot
	for j := (gap + 1) & mask; s.index[j] != 0; j = (j + 1) & mask {
		v := s.index[j]
		home := s.home(hashID(&s.at(v&low - 1).id))
		if (j-home)&mask >= (j-gap)&mask {
			s.index[gap] = v
			gap = j
		}
	}
	s.index[gap] = 0
}

// grow doubles the index and fills it again from the live entries.
func (s *seenTable) grow() {
	s.bits++
	s.index = make([]uint32, 1<<s.bits)
	mask := uint64(len(s.index) - 1)
	for pos := range s.used {
		p := s.at(pos)
		if p.bits&packedLive == 0 {
			continue
		}
		h := hashID(&p.id)
		slot := s.home(h)
		for s.index[slot] != 0 {
			slot = (slot + 1) & mask
		}
		s.index[slot] = s.slotValue(h, pos)
	}
}

// sweep deletes every entry in a bucket record (not flagPerKey) that
// expires at or before now, and returns how many it deleted.
func (s *seenTable) sweep(now int64) int {
	n := 0
	for pos := range s.used {
		p := s.at(pos)
		if p.bits&packedLive == 0 {
			continue
		}
		if v, _ := s.entry(pos); v.flags&flagPerKey == 0 && v.expiresAt <= now {
			id := p.id
			s.delete(&id)
			n++
		}
	}
	return n
}

// keyAt returns the id at pos, and whether pos holds a key.
func (s *seenTable) keyAt(pos uint32) (id [16]byte, ok bool) {
	p := s.at(pos)
	return p.id, p.bits&packedLive != 0
}

func putUint(b []byte, x uint64) {
	for i := range b {
		b[i] = byte(x >> (8 * i))
	}
}

func getUint(b []byte) (x uint64) {
	for i := range b {
		x |= uint64(b[i]) << (8 * i)
	}
	return x
}
