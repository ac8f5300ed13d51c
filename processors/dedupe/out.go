package dedupe

import (
	"unsafe"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/schemas"
)

// slab hands out the records a task emits and the bytes of their keys and
// values (and the strings of the records being encoded), carved from
// chunks allocated in bulk and reused from one transaction to the next.
//
// The hazard is reuse: a record, its bytes and every string over them are
// overwritten once their chunk is handed out again. A chunk is handed out
// again only after release, which the task calls in Commit and Abort: by
// then the stage has flushed the transaction (the producer calls every
// record's promise before Flush returns and holds none of them after it)
// and reads none of its records any more (stage.Task documents both;
// internal/stage's reuse test holds the runtime to it). Nothing the task
// keeps across a transaction may point into a chunk: strings that
// outlive Process are copied where they are kept (see Task.Process).
//
// After release the chunks the transaction used are the free ones, in the
// order they were used; the chunks of the transaction before that it did
// not need are dropped, so a slab holds about what its last transaction
// emitted (and byte chunks stale records in kept chunks point into).
type slab struct {
	recs []kgo.Record
	buf  []byte
	enc  schemas.Encoder

	// Chunks filled in this transaction (the current recs and buf are
	// not among them), and the free ones to use before allocating.
	usedRecs, freeRecs [][]kgo.Record
	usedBufs, freeBufs [][]byte
}

const (
	slabRecords = 256
	slabBytes   = 64 << 10
	// valueRoom is the room reserved for one encoded value, textRoom for
	// one key or string; a larger one is written to its own allocation.
	valueRoom = 2 << 10
	textRoom  = 512
)

// newRecord returns a zero record from the slab.
func (s *slab) newRecord() *kgo.Record {
	if len(s.recs) == cap(s.recs) {
		if s.recs != nil {
			s.usedRecs = append(s.usedRecs, s.recs)
		}
		if n := len(s.freeRecs); n > 0 {
			s.recs, s.freeRecs = s.freeRecs[n-1][:0], s.freeRecs[:n-1]
		} else {
			s.recs = make([]kgo.Record, 0, slabRecords)
		}
	}
	s.recs = s.recs[:len(s.recs)+1]
	r := &s.recs[len(s.recs)-1]
	*r = kgo.Record{}
	return r
}

// reserve returns an empty slice over at least n free bytes of the slab,
// to append to; bytes or text then claim what was appended. n is at most
// valueRoom, far below a chunk's size.
func (s *slab) reserve(n int) []byte {
	if cap(s.buf)-len(s.buf) < n {
		if s.buf != nil {
			s.usedBufs = append(s.usedBufs, s.buf)
		}
		if k := len(s.freeBufs); k > 0 {
			s.buf, s.freeBufs = s.freeBufs[k-1][:0], s.freeBufs[:k-1]
		} else {
			s.buf = make([]byte, 0, max(slabBytes, n))
		}
	}
	return s.buf[len(s.buf):]
}

// release ends the transaction: every chunk it used may be handed out
// again (see the hazard above).
func (s *slab) release() {
	s.freeRecs = reuse(s.freeRecs, s.usedRecs)
	s.freeBufs = reuse(s.freeBufs, s.usedBufs)
	s.usedRecs, s.usedBufs = s.usedRecs[:0], s.usedBufs[:0]
	s.recs, s.buf = s.recs[:0], s.buf[:0]
}

// reuse returns the free list after a transaction that filled used (the
// chunk it was filling stays the current one): used, in free's storage,
// to be taken in the order they were filled. The free chunks the
// transaction did not take are dropped.
func reuse[T any](free, used [][]T) [][]T {
	clear(free)
	free = free[:0]
	for i := len(used) - 1; i >= 0; i-- {
		free = append(free, used[i][:0])
	}
	clear(used)
	return free
}

// bytes claims b, a slice reserve returned and appended to. If the
// appends outgrew the reservation, b is its own allocation and the slab is
// left as it was.
func (s *slab) bytes(b []byte) []byte {
	free := s.buf[len(s.buf):cap(s.buf)]
	if len(b) == 0 || len(b) > len(free) || unsafe.SliceData(b) != unsafe.SliceData(free) {
		return b
	}
	s.buf = s.buf[:len(s.buf)+len(b)]
	return b[:len(b):len(b)]
}

// text claims b like bytes and returns it as a string without copying:
// valid until the chunk is handed out again (see the hazard above).
func (s *slab) text(b []byte) string {
	b = s.bytes(b)
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// schemaHeaders is the header slice of records of one schema, shared by
// all of them: nobody writes to a record's headers after it is emitted, and
// its capacity is its length, so an append copies it.
func schemaHeaders(name string) []kgo.RecordHeader {
	return []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(name)}}[:1:1]
}

var (
	decisionHeaders   = schemaHeaders(schemas.DecisionV1)
	decisionV2Headers = schemaHeaders(schemas.DecisionV2)
	seenHeaders       = schemaHeaders(schemas.SeenEntryV1)
	seenV2Headers     = schemaHeaders(schemas.SeenEntryV2)
	acceptedHeaders   = schemaHeaders(schemas.AcceptedV1)
	acceptedV2Headers = schemaHeaders(schemas.AcceptedV2)
)

// record returns a slab record of v under key on topic, stamped at.
func (s *slab) record(topic, key string, v schemas.Record, headers []kgo.RecordHeader, at int64) (*kgo.Record, error) {
	return s.recordKey(topic, append(s.reserve(textRoom), key...), v, headers, at)
}

// recordKey is record with the key appended to a slice reserve returned.
func (s *slab) recordKey(topic string, key []byte, v schemas.Record, headers []kgo.RecordHeader, at int64) (*kgo.Record, error) {
	key = s.bytes(key)
	b, err := s.enc.Append(s.reserve(valueRoom), v)
	if err != nil {
		return nil, err
	}
	return s.recordOf(topic, key, b, headers, at), nil
}

// recordOf returns a slab record of value under key on topic, stamped at;
// key is claimed already, value a slice reserve returned, appended to.
func (s *slab) recordOf(topic string, key, value []byte, headers []kgo.RecordHeader, at int64) *kgo.Record {
	r := s.newRecord()
	r.Topic, r.Key, r.Value, r.Timestamp, r.Headers = topic, key, s.bytes(value), msTime(at), headers
	return r
}
