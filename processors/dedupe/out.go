package dedupe

import (
	"unsafe"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/schemas"
)

// slab hands out the records a task emits and the bytes of their keys and
// values (and the strings of the records being encoded), carved from
// chunks allocated in bulk. Nothing in a chunk is ever reused or
// overwritten: a record, its bytes and the strings over them stay valid for
// as long as anyone holds them (the producer holds them until the
// transaction ends); a chunk is freed by the garbage collector once nothing
// points into it.
type slab struct {
	recs []kgo.Record
	buf  []byte
	enc  schemas.Encoder
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
		s.recs = make([]kgo.Record, 0, slabRecords)
	}
	s.recs = s.recs[:len(s.recs)+1]
	return &s.recs[len(s.recs)-1]
}

// reserve returns an empty slice over at least n free bytes of the slab,
// to append to; bytes or text then claim what was appended.
func (s *slab) reserve(n int) []byte {
	if cap(s.buf)-len(s.buf) < n {
		s.buf = make([]byte, 0, max(slabBytes, n))
	}
	return s.buf[len(s.buf):]
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

// text claims b like bytes and returns it as a string without copying: the
// slab never overwrites it.
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
