package dedupe

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

func tableID(n uint64) [16]byte {
	var id [16]byte
	binary.LittleEndian.PutUint64(id[:8], n)
	binary.LittleEndian.PutUint64(id[8:], ^n)
	return id
}

// packable is an entry whose every field fits the packed form.
func packable(n int64) seenVal {
	v := seenVal{firstAt: 1_700_000_000_000 + n, expiresAt: 1_700_000_060_000 + n, offset: n, partition: 4,
		outcome: outcomeDuplicate, flags: flagContent}
	binary.LittleEndian.PutUint64(v.notification[:], uint64(n)*7+1)
	binary.LittleEndian.PutUint64(v.request[8:], uint64(n)*11+3)
	binary.LittleEndian.PutUint64(v.content[4:], uint64(n)*13+5)
	return v
}

func TestTheSeenTableGivesBackEveryEntryItIsGiven(t *testing.T) {
	strs := seenStrings{request: "call #1"}
	cases := []struct {
		name     string
		sums     bool
		val      func(v *seenVal)
		strs     seenStrings
		wantSide bool
		want     func(v *seenVal) // what a lookup gives back, from the value set
	}{
		{"an ordinary entry is packed", true, func(*seenVal) {}, seenStrings{}, false, nil},
		{"an entry at the first millisecond of 1970 is packed", true, func(v *seenVal) { v.firstAt, v.expiresAt = 0, 0 }, seenStrings{}, false, nil},
		{"an entry before 1970 is kept whole", true, func(v *seenVal) { v.firstAt = -1 }, seenStrings{}, true, nil},
		{"an entry at the last millisecond of 48 bits is packed", true, func(v *seenVal) { v.firstAt, v.expiresAt = maxFirstAt, maxFirstAt+maxWindow }, seenStrings{}, false, nil},
		{"an entry past 48 bits of milliseconds is kept whole", true, func(v *seenVal) { v.firstAt, v.expiresAt = maxFirstAt+1, maxFirstAt+2 }, seenStrings{}, true, nil},
		{"a window of 32 bits is packed", true, func(v *seenVal) { v.expiresAt = v.firstAt + maxWindow }, seenStrings{}, false, nil},
		{"a window past 32 bits is kept whole", true, func(v *seenVal) { v.expiresAt = v.firstAt + maxWindow + 1 }, seenStrings{}, true, nil},
		{"an expiry before the first time is kept whole", true, func(v *seenVal) { v.expiresAt = v.firstAt - 1 }, seenStrings{}, true, nil},
		{"an expiry far before the first time is kept whole", true, func(v *seenVal) { v.firstAt, v.expiresAt = maxFirstAt, math.MinInt64 }, seenStrings{}, true, nil},
		{"offset 0 is packed", true, func(v *seenVal) { v.offset = 0 }, seenStrings{}, false, nil},
		{"the last offset of 40 bits is packed", true, func(v *seenVal) { v.offset = maxOffset }, seenStrings{}, false, nil},
		{"an offset past 40 bits is kept whole", true, func(v *seenVal) { v.offset = maxOffset + 1 }, seenStrings{}, true, nil},
		{"a negative offset is kept whole", true, func(v *seenVal) { v.offset = -1 }, seenStrings{}, true, nil},
		{"an entry of another partition is kept whole", true, func(v *seenVal) { v.partition = 5 }, seenStrings{}, true, nil},
		{"an entry with strings is kept whole with them", true, func(v *seenVal) { v.flags |= flagStrings }, strs, true, nil},
		{"an accepted entry is packed", true, func(v *seenVal) { v.outcome = outcomeAccepted }, seenStrings{}, false, nil},
		{"an entry without content is packed without it", true, func(v *seenVal) { v.flags, v.content = 0, [16]byte{} }, seenStrings{}, false, nil},
		{"a table without content hashes drops the entry's", false, func(*seenVal) {}, seenStrings{}, false,
			func(v *seenVal) { v.flags, v.content = 0, [16]byte{} }},
		{"a table without content hashes keeps a whole entry's", false, func(v *seenVal) { v.partition = 5 }, seenStrings{}, true, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newSeenTable(4, c.sums)
			v := packable(9)
			c.val(&v)
			id, other := tableID(1), tableID(0)
			s.set(&other, packable(0), seenStrings{}) // a neighbour that must stay as it is
			pos := s.set(&id, v, c.strs)
			want := v
			if c.want != nil {
				c.want(&want)
			}
			got, gotStrs, ok := s.get(&id)
			if !ok || got != want || gotStrs != c.strs {
				t.Fatalf("got %+v %+v %v, want %+v %+v", got, gotStrs, ok, want, c.strs)
			}
			if side := s.at(pos).bits&packedSide != 0; side != c.wantSide || len(s.side) != map[bool]int{true: 1}[side] {
				t.Fatalf("kept whole: %v (%d on the side), want %v", side, len(s.side), c.wantSide)
			}
			if got, _, ok := s.get(&[16]byte{}); ok || got != (seenVal{}) {
				t.Fatal("a missing key gave an entry")
			}
			// Replaced by an ordinary entry, the whole one is dropped.
			s.set(&id, packable(2), seenStrings{})
			if got, gotStrs, _ := s.get(&id); got != packable(2) && c.sums || gotStrs != (seenStrings{}) || len(s.side) != 0 {
				t.Fatalf("replaced: %+v %+v, %d on the side", got, gotStrs, len(s.side))
			}
			s.set(&id, v, c.strs)
			s.delete(&id)
			if _, _, ok := s.get(&id); ok || len(s.side) != 0 || s.len() != 1 {
				t.Fatalf("deleted: found %v, %d on the side, %d keys", ok, len(s.side), s.len())
			}
			if got, _, ok := s.get(&other); !ok || got.firstAt != packable(0).firstAt {
				t.Fatalf("the neighbour changed: %+v %v", got, ok)
			}
		})
	}
}

func TestTheSeenTableReusesTheLastDeletedPosition(t *testing.T) {
	s := newSeenTable(4, true)
	for i := range 5 {
		if pos := s.set(&[16]byte{byte(i)}, packable(int64(i)), seenStrings{}); pos != uint32(i) {
			t.Fatalf("key %d at position %d", i, pos)
		}
	}
	if pos := s.set(&[16]byte{3}, packable(30), seenStrings{}); pos != 3 {
		t.Fatalf("a key set again moved to position %d", pos)
	}
	s.delete(&[16]byte{1})
	s.delete(&[16]byte{3})
	s.delete(&[16]byte{9}) // missing: nothing freed
	for _, want := range []uint32{3, 1, 5} {
		if pos := s.set(&[16]byte{byte(10 + want)}, packable(0), seenStrings{}); pos != want {
			t.Fatalf("new key at position %d, want %d", pos, want)
		}
	}
	if s.len() != 6 || s.used != 6 {
		t.Fatalf("%d keys in %d positions, want 6 in 6", s.len(), s.used)
	}
	for pos, want := range []byte{0, 11, 2, 13, 4, 15} {
		if id, ok := s.keyAt(uint32(pos)); !ok || id != ([16]byte{want}) {
			t.Fatalf("position %d holds %v (%v), want key %d", pos, id[0], ok, want)
		}
	}
	s.delete(&[16]byte{2})
	if _, ok := s.keyAt(2); ok {
		t.Fatal("a deleted key's position still holds it")
	}
}

// The table against a map, through random sets and deletes over a few
// thousand keys: the index grows, runs of slots collide and close up, and
// positions and chunks are reused.
func TestTheSeenTableAgreesWithAMap(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	for _, keys := range []int{10, 3000} {
		t.Run(fmt.Sprintf("over %d keys", keys), func(t *testing.T) {
			s := newSeenTable(4, true)
			model := map[[16]byte]seenVal{}
			check := func(step int) {
				if s.len() != len(model) {
					t.Fatalf("step %d: %d keys, want %d", step, s.len(), len(model))
				}
				for i := range keys {
					id := tableID(uint64(i))
					got, _, ok := s.get(&id)
					want, wantOK := model[id]
					if ok != wantOK || got != want {
						t.Fatalf("step %d: key %d: %+v %v, want %+v %v", step, i, got, ok, want, wantOK)
					}
				}
				if s.live*4 > len(s.index)*3 || int(s.used) >= len(s.index) {
					t.Fatalf("step %d: %d keys in %d positions in an index of %d", step, s.live, s.used, len(s.index))
				}
			}
			for step := range 20 * keys {
				id := tableID(uint64(rng.IntN(keys)))
				if rng.IntN(3) == 0 {
					s.delete(&id)
					delete(model, id)
				} else {
					v := packable(int64(step))
					if step%7 == 0 {
						v.partition = 1 // kept whole
					}
					s.set(&id, v, seenStrings{})
					model[id] = v
				}
				if step%(keys/2+1) == 0 {
					check(step)
				}
			}
			check(-1)
			for id := range model {
				s.delete(&id)
			}
			if s.len() != 0 || len(s.side) != 0 || len(s.free) != int(s.used) {
				t.Fatalf("emptied: %d keys, %d on the side, %d of %d positions free", s.len(), len(s.side), len(s.free), s.used)
			}
			for i, v := range s.index {
				if v != 0 {
					t.Fatalf("emptied: slot %d still holds %x", i, v)
				}
			}
		})
	}
}

func TestAnIndexSlotCarriesItsKeysHashAboveThePosition(t *testing.T) {
	s := newSeenTable(0, false)
	id := tableID(42)
	pos := s.set(&id, packable(0), seenStrings{})
	slot, _, _ := s.find(&id, hashID(&id))
	if v, want := s.index[slot], uint32(hashID(&id))&^s.low()|(pos+1); v != want {
		t.Fatalf("slot %x, want %x", v, want)
	}
	if home := hashID(&id) >> (64 - minBits); slot != home {
		t.Fatalf("an only key sits at slot %d, not its home %d (the top %d bits of its hash)", slot, home, minBits)
	}
	// A slot whose tag disagrees is passed over without reading its entry:
	// here its entry is the key's, so only the tag can tell them apart.
	s.index[slot] ^= 1 << 31
	if _, _, ok := s.find(&id, hashID(&id)); ok {
		t.Fatal("a slot with another tag was taken for the key")
	}
}

func TestAPositionItemKeepsItsTime(t *testing.T) {
	for _, at := range []int64{0, 1, -1, 1_700_000_000_123, math.MaxInt64, math.MinInt64, 1 << 32, 1<<32 - 1} {
		if it := newPosItem(at, 7); it.when() != at || it.pos != 7 {
			t.Errorf("item of %d at position 7 gives back %d at %d", at, it.when(), it.pos)
		}
	}
}

func TestTheExpiryQueuePopsByTimeThenPosition(t *testing.T) {
	// Each pattern pushes items at times from at(i), in a mix of pushes
	// and pops, and every pop must return the earliest item queued (by
	// time, then position), whether it sits in the run or in the heap.
	cases := []struct {
		name string
		at   func(rng *rand.Rand, i int) int64
		pops int // pop after every this many pushes (0: only at the end)
	}{
		{"items pushed in random order leave in order", func(rng *rand.Rand, i int) int64 { return int64(rng.IntN(50)) - 25 }, 0},
		{"items pushed in order leave in order", func(rng *rand.Rand, i int) int64 { return int64(i / 3) }, 0},
		{"items pushed in order with one in ten earlier leave in order", func(rng *rand.Rand, i int) int64 {
			if i%10 == 9 {
				return int64(i - rng.IntN(400))
			}
			return int64(i)
		}, 0},
		{"items pushed in order and popped meanwhile leave in order", func(rng *rand.Rand, i int) int64 { return int64(i) }, 3},
		{"items pushed mostly in order and popped meanwhile leave in order", func(rng *rand.Rand, i int) int64 {
			if i%7 == 6 {
				return int64(i - rng.IntN(2000))
			}
			return int64(i)
		}, 2},
		{"items pushed in random order and popped meanwhile leave in order", func(rng *rand.Rand, i int) int64 { return int64(rng.IntN(5000)) }, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(5, 6))
			var q queue[posItem]
			var queued []posItem // what q holds, unordered
			pop := func() {
				it := q.pop()
				least := 0
				for i, w := range queued {
					if w.before(queued[least]) {
						least = i
					}
				}
				if w := queued[least]; w.before(it) || it.before(w) {
					t.Fatalf("popped %d@%d, want %d@%d", it.when(), it.pos, w.when(), w.pos)
				}
				for i, w := range queued {
					if w == it {
						queued = append(queued[:i], queued[i+1:]...)
						break
					}
				}
				if q.len() != len(queued) {
					t.Fatalf("the queue holds %d items, want %d", q.len(), len(queued))
				}
			}
			for i := range 5 * runCompactAt { // past the run's compaction
				it := newPosItem(c.at(rng, i), uint32(i))
				q.push(it)
				queued = append(queued, it)
				if c.pops > 0 && i%c.pops == 0 {
					pop()
				}
			}
			for len(queued) > 0 {
				pop()
			}
			if q.due(math.MaxInt64) {
				t.Fatal("an empty queue has an item due")
			}
		})
	}
	t.Run("an item is due at its time and not before", func(t *testing.T) {
		var q queue[posItem]
		q.push(newPosItem(10, 0))
		q.push(newPosItem(5, 1)) // before the run's last: into the heap
		if q.due(4) || !q.due(5) {
			t.Fatal("the heap's item is due before its time, or not at it")
		}
		if it := q.pop(); it.when() != 5 {
			t.Fatalf("popped %d first, want 5", it.when())
		}
		if q.due(9) || !q.due(10) {
			t.Fatal("the run's item is due before its time, or not at it")
		}
	})
	for _, queued := range []int{10, 3 * runCompactAt} {
		t.Run(fmt.Sprintf("the run does not keep the items it popped with %d queued", queued), func(t *testing.T) {
			// Items pushed in order, as many queued at all times: the run
			// never empties, so only moving its queued items down frees
			// what it popped.
			var q queue[posItem]
			for i := range queued {
				q.push(newPosItem(int64(i), 0))
			}
			for i := queued; i < 100*runCompactAt; i++ {
				q.push(newPosItem(int64(i), 0))
				if it := q.pop(); it.when() != int64(i-queued) {
					t.Fatalf("popped %d, want %d", it.when(), i-queued)
				}
			}
			if most := 2*queued + runCompactAt; len(q.run) > most {
				t.Fatalf("the run's slice holds %d items for %d queued, want at most %d", len(q.run), queued, most)
			}
		})
	}
	t.Run("a reset queue is empty and queues again", func(t *testing.T) {
		var q queue[posItem]
		q.push(newPosItem(3, 0))
		q.push(newPosItem(1, 1))
		q.reset()
		if q.len() != 0 || q.due(math.MaxInt64) {
			t.Fatal("a reset queue holds items")
		}
		q.push(newPosItem(7, 2))
		if it := q.pop(); it.when() != 7 || q.len() != 0 {
			t.Fatalf("after a reset, popped %d@%d, %d left", it.when(), it.pos, q.len())
		}
	})
}

func TestTheIndexDoublesOnlyWhenAKeyWouldFillItPastThreeQuarters(t *testing.T) {
	s := newSeenTable(4, false)
	for i := range 6 { // 6 of 8 slots: three quarters exactly
		s.set(&[16]byte{byte(i)}, packable(0), seenStrings{})
	}
	if len(s.index) != 8 {
		t.Fatalf("6 keys in an index of %d slots, want 8", len(s.index))
	}
	s.set(&[16]byte{5}, packable(1), seenStrings{}) // a key set again takes no slot
	if len(s.index) != 8 {
		t.Fatalf("a key set again grew the index to %d slots", len(s.index))
	}
	s.set(&[16]byte{6}, packable(0), seenStrings{})
	if len(s.index) != 16 || s.bits != 4 {
		t.Fatalf("7 keys in an index of %d slots (%d bits), want 16 (4)", len(s.index), s.bits)
	}
	for i := range 7 {
		if _, _, ok := s.get(&[16]byte{byte(i)}); !ok {
			t.Fatalf("key %d lost when the index grew", i)
		}
	}
}
