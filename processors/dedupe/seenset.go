package dedupe

import (
	"fmt"
	"slices"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/schemas"
)

// SeenSet is a read-only copy of the dedupe stage's seen-set, built from
// herald.seen's records as they are read, packed as the stage keeps its
// own (seentable.go: about 64 to 100 bytes a live key, no pointers per
// key): what the API decides over to explain a send without making it.
// A copy of the whole seen-set lives in every API instance, so it must
// cost what the stage's costs, not a map entry of strings per key
// (BENCHMARKS.md, "The API's own load generator, its read model and its
// seen-set copy packed").
//
// Records are applied in the order read, one table pair per herald.seen
// partition (the partition of the stage task that wrote them, whose
// entries name it as their source). It is safe for one goroutine applying
// records and any number deciding at once.
type SeenSet struct {
	rd seenReader // Apply's

	mu    sync.RWMutex
	parts map[int32]*[2]*seenTable
	order []int32 // the partitions, ascending: where a lookup looks first
}

// NewSeenSet returns an empty SeenSet.
func NewSeenSet() *SeenSet { return &SeenSet{parts: map[int32]*[2]*seenTable{}} }

// Apply applies one herald.seen record: the entry under its key set, or
// deleted by a tombstone. A value that is not a seen entry is an error and
// changes nothing; a key in neither of the stage's forms is skipped, as
// the stage skips it (see Task.Restore).
func (s *SeenSet) Apply(r *kgo.Record) error {
	k, ok := parseSeenKey(r.Key)
	var v seenVal
	var strs seenStrings
	if r.Value != nil {
		var err error
		if v, strs, err = s.rd.read(r.Value); err != nil {
			return fmt.Errorf("dedupe: seen-set copy: key %q: %w", r.Key, err)
		}
	}
	if !ok {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.parts[r.Partition]
	if t == nil {
		if r.Value == nil {
			return nil
		}
		t = &[2]*seenTable{newSeenTable(r.Partition, true), newSeenTable(r.Partition, false)}
		s.parts[r.Partition] = t
		s.order = append(s.order, r.Partition)
		slices.Sort(s.order)
	}
	if r.Value == nil {
		t[k.kind-1].delete(&k.id)
		return nil
	}
	t[k.kind-1].set(&k.id, v, strs)
	return nil
}

// Len is the number of entries held.
func (s *SeenSet) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	n := 0
	for _, t := range s.parts {
		n += t[0].len() + t[1].len()
	}
	return n
}

// Decide is p.Decide over the set: what the stage would decide about req
// at time at, were its seen-set this one.
func (s *SeenSet) Decide(p Policy, req schemas.Request, at int64, src Source) Result {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return p.decideOver(req, at, src, seenSetStore{s: s})
}

// seenSetStore is SeenSet's seenStore; its caller holds the read lock.
type seenSetStore struct {
	freshStrings
	s *SeenSet
}

// get looks k up in each partition's table, the lowest partition first: a
// key the stage wrote on two partitions (two tasks, each with a seen-set
// of its own) is found where it was written first by partition number.
func (st seenSetStore) get(k seenKey) (seenVal, seenStrings, bool) {
	for _, p := range st.s.order {
		if v, strs, ok := st.s.parts[p][k.kind-1].get(&k.id); ok {
			return v, strs, true
		}
	}
	return seenVal{}, seenStrings{}, false
}
