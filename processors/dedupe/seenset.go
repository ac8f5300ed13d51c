package dedupe

import (
	"fmt"
	"slices"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/schemas/seenpb"
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
	rd seenReader       // Apply's
	m  seenpb.SeenEntry // Apply's, for bucket records

	mu    sync.RWMutex
	parts map[int32]*seenPart
	order []int32 // the partitions, ascending: where a lookup looks first
}

// NewSeenSet returns an empty SeenSet.
func NewSeenSet() *SeenSet { return &SeenSet{parts: map[int32]*seenPart{}} }

// seenPart is the copy of one herald.seen partition.
type seenPart struct {
	t       [2]*seenTable // by kind
	sweptTo int64         // the largest sweep time read
	sets    int           // entries of bucket records set since the last sweep
}

// Apply applies one herald.seen record: in the per-key layout the entry
// under its key set, or deleted by a tombstone; in the batched layout
// (batch.go) a bucket record's entries set in turn, and the entries that
// expire at or before the sweep time the records carry deleted now and
// then (sweepEvery). A value that is not a seen entry (or batch) is an
// error and changes nothing; a key in none of the stage's forms is
// skipped, as the stage skips it (see Task.Restore).
func (s *SeenSet) Apply(r *kgo.Record) error {
	_, _, isBucket := parseBucketKey(r.Key)
	if isBucket || string(r.Key) == clockKey {
		if r.Value == nil {
			return nil // a bucket's entries are deleted by the sweep time
		}
		return s.applyBatch(r)
	}
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
	p := s.part(r.Partition, r.Value != nil)
	if p == nil {
		return nil
	}
	if r.Value == nil {
		if old, _, found := p.t[k.kind-1].get(&k.id); found && old.flags&flagPerKey != 0 {
			p.t[k.kind-1].delete(&k.id)
		}
		return nil
	}
	v.flags |= flagPerKey
	p.t[k.kind-1].set(&k.id, v, strs)
	return nil
}

// sweepEvery is how many entries a partition's copy sets, at least,
// between two sweeps; a sweep also waits for as many as half its entries,
// so sweeping costs a constant time an entry set.
const sweepEvery = 4096

// applyBatch applies a bucket or clock record.
func (s *SeenSet) applyBatch(r *kgo.Record) error {
	// Checked whole before anything is set, so that an error changes nothing.
	if _, _, err := readBatch(r.Value, &s.m, func(*seenpb.SeenEntry) {}); err != nil {
		return fmt.Errorf("dedupe: seen-set copy: key %q: %w", r.Key, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var p *seenPart
	_, sweptTo, _ := readBatch(r.Value, &s.m, func(m *seenpb.SeenEntry) {
		if p == nil {
			p = s.part(r.Partition, true)
		}
		k := keyOfV2(m)
		v, strs := valOfV2(m)
		p.t[k.kind-1].set(&k.id, v, strs)
		p.sets++
	})
	if p == nil {
		if p = s.part(r.Partition, false); p == nil {
			return nil
		}
	}
	p.sweptTo = max(p.sweptTo, sweptTo)
	if n := p.t[0].len() + p.t[1].len(); p.sets >= sweepEvery && p.sets*2 >= n {
		p.t[0].sweep(p.sweptTo)
		p.t[1].sweep(p.sweptTo)
		p.sets = 0
	}
	return nil
}

// part returns the copy of a partition, made if create is set.
func (s *SeenSet) part(partition int32, create bool) *seenPart {
	p := s.parts[partition]
	if p == nil && create {
		p = &seenPart{t: [2]*seenTable{newSeenTable(partition, true), newSeenTable(partition, false)}}
		s.parts[partition] = p
		s.order = append(s.order, partition)
		slices.Sort(s.order)
	}
	return p
}

// Len is the number of entries held.
func (s *SeenSet) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	n := 0
	for _, t := range s.parts {
		n += t.t[0].len() + t.t[1].len()
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
		if v, strs, ok := st.s.parts[p].t[k.kind-1].get(&k.id); ok {
			return v, strs, true
		}
	}
	return seenVal{}, seenStrings{}, false
}
