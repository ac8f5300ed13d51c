package dedupe

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/schemas/seenpb"
)

// The seen-set's batched layout on herald.seen (herald.seen/v3).
//
// Up to herald.seen/v2 the stage wrote one record a key ("idem/<id>",
// "dedupe/<id>") and one tombstone a key once its entry expired: in a
// stage's steady state 3.05 seen-set records a request, half of them
// tombstones (BENCHMARKS.md, "The stage on the broker with its keys
// expiring"). The batched layout writes the entries one transaction
// makes, grouped by expiry bucket, as few records:
//
//   - The entries whose expiry falls in one bucket (bucketMs wide, ending
//     at E) go into records keyed "bucket/<E>/<seq>", seq counting the
//     bucket's records from 0 on the partition, at most batchEntries
//     entries a record. Within a record the entries are in the order the
//     stage set them; across records of a transaction too (see
//     Task.logEntry: a key set twice in one transaction is never in two
//     records written out of order).
//   - Once the partition's sweep time (stream time less the skew
//     allowance) reaches E−1, every entry of the bucket has expired and
//     been deleted in memory: the stage tombstones the bucket's records,
//     "bucket/<E>/0" to "bucket/<E>/<n−1>", all in one transaction. No
//     record is ever written to a bucket after that: an entry already due
//     when it is set (expiry at or before the sweep time) is not written
//     at all (below).
//   - Every record carries the partition's stream time and sweep time at
//     the time it was written. A transaction that changed the seen-set
//     but wrote no bucket record with its final times writes them under
//     the key "clock".
//
// In memory an entry is still deleted at its own expiry (plus the skew
// allowance), as before: decisions are those of the per-key layout.
//
// A key seen again moves buckets: it is set again only once its entry has
// expired, by a request stamped at or after that expiry, so its new entry
// goes to the same bucket or a later one, in a later record (or later in
// the same record); the older record keeps the old copy until its own
// bucket's tombstones.
//
// Restore reads the records in offset order and sets every entry of a
// bucket record in turn: a key set again later (a later record, or later
// in the same record) holds its later entry, as in memory. It then
// deletes, before any request is decided, every entry whose expiry is at
// or before the largest sweep time read: exactly the entries the running
// stage had deleted (whose records may still be on the topic, compaction
// or the bucket's tombstones pending), plus entries set by the last
// request of its last transaction that were due already (which that
// stage deleted at its next request, before deciding it). An entry
// already due when set is not written, so a restore does not see it, and
// the stage that set it deletes it at its next request, before deciding
// anything: both then decide over the same set.
//
// Records of the per-key layout (herald.seen/v1, v2) on the same topic are
// read as before: their entries are marked perKey in memory, and the
// stage tombstones such a key, as before, when its entry expires or is
// replaced by one in a bucket record. A deployment upgraded from the
// per-key layout so keeps its seen-set, and the per-key records leave
// the topic as their entries expire.

const (
	// bucketMs is the width of an expiry bucket: a bucket record stays on
	// the topic up to a minute after its entries expired.
	bucketMs = 60_000
	// batchEntries is the most entries a bucket record holds (about 120
	// bytes each), and batchBytes about the most bytes (a record is
	// written once its entries reach it), so that a record stays far below
	// the broker's message limit (1 MB by default) whatever request ids the
	// producers chose.
	batchEntries = 512
	batchBytes   = 64 << 10
	// SeenBatchV3 is the schema of a bucket or clock record's value,
	// herald.seen.v2.SeenBatch in schemas/seenpb/seen.proto.
	SeenBatchV3 = "herald.seen/v3"
)

var seenBatchHeaders = schemaHeaders(SeenBatchV3)

const (
	bucketPrefix = "bucket/"
	clockKey     = "clock"
)

// bucketEnd is the end of the expiry bucket of an entry expiring at e.
func bucketEnd(e int64) int64 {
	q := e / bucketMs
	if e%bucketMs != 0 && e < 0 {
		q--
	}
	return (q + 1) * bucketMs
}

// appendBucketKey appends "bucket/<end>/<seq>".
func appendBucketKey(b []byte, end int64, seq uint32) []byte {
	b = append(b, bucketPrefix...)
	b = strconv.AppendInt(b, end, 10)
	b = append(b, '/')
	return strconv.AppendUint(b, uint64(seq), 10)
}

// parseBucketKey reads "bucket/<end>/<seq>".
func parseBucketKey(key []byte) (end int64, seq uint32, ok bool) {
	rest, found := bytes.CutPrefix(key, []byte(bucketPrefix))
	if !found {
		return 0, 0, false
	}
	e, s, found := bytes.Cut(rest, []byte("/"))
	if !found {
		return 0, 0, false
	}
	end, err1 := strconv.ParseInt(string(e), 10, 64)
	n, err2 := strconv.ParseUint(string(s), 10, 32)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return end, uint32(n), true
}

// Field numbers of herald.seen.v2.SeenBatch.
const (
	batchStreamTime = 1
	batchSweptTo    = 2
	batchEntry      = 3
)

// appendBatchTimes appends a SeenBatch's times (its fields may come in any
// order: the entries are appended before, as they come).
func appendBatchTimes(b []byte, streamTime, sweptTo int64) []byte {
	b = protowire.AppendTag(b, batchStreamTime, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(streamTime))
	b = protowire.AppendTag(b, batchSweptTo, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(sweptTo))
}

// appendBatchEntry appends one entry of a SeenBatch.
func appendBatchEntry(b []byte, m *seenpb.SeenEntry) []byte {
	b = protowire.AppendTag(b, batchEntry, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(m.SizeVT()))
	return schemas.AppendSeenProto(b, m)
}

var errBatch = errors.New("invalid " + SeenBatchV3 + " record")

// readBatch reads a SeenBatch: its times, and each entry, checked, in
// order, into m (its fields pointing into b) for fn.
func readBatch(b []byte, m *seenpb.SeenEntry, fn func(*seenpb.SeenEntry)) (streamTime, sweptTo int64, err error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, 0, fmt.Errorf("%w: %v", errBatch, protowire.ParseError(n))
		}
		b = b[n:]
		if typ == protowire.VarintType && (num == batchStreamTime || num == batchSweptTo) {
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return 0, 0, fmt.Errorf("%w: %v", errBatch, protowire.ParseError(n))
			}
			b = b[n:]
			if num == batchStreamTime {
				streamTime = int64(v)
			} else {
				sweptTo = int64(v)
			}
		} else if typ == protowire.BytesType && num == batchEntry {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return 0, 0, fmt.Errorf("%w: %v", errBatch, protowire.ParseError(n))
			}
			b = b[n:]
			m.Reset() // the generated decoder merges into what m holds
			if err := m.UnmarshalVTUnsafe(v); err != nil {
				return 0, 0, fmt.Errorf("%w: entry: %v", errBatch, err)
			}
			if err := schemas.CheckSeenV2(m); err != nil {
				return 0, 0, fmt.Errorf("%w: entry: %v", errBatch, err)
			}
			fn(m)
		} else {
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return 0, 0, fmt.Errorf("%w: %v", errBatch, protowire.ParseError(n))
			}
			b = b[n:]
		}
	}
	return streamTime, sweptTo, nil
}

// keyOfV2 is the memory key of a checked herald.seen/v2 entry.
func keyOfV2(m *seenpb.SeenEntry) seenKey {
	k := seenKey{id: [16]byte(m.Scope), kind: kindDedupe}
	if m.Kind == seenpb.Kind_KIND_IDEMPOTENCY {
		k.kind = kindIdem
	}
	return k
}

// bucketCount is a live bucket: its end and how many records it has.
type bucketCount struct {
	end int64
	n   uint32
}

// buckets are a partition's live buckets, by end: those with records on
// the topic not yet tombstoned.
type buckets struct {
	live []bucketCount
	// saved is live as the last transaction committed it, kept while the
	// open one changes live (dirty), for Abort.
	saved []bucketCount
	dirty bool
}

// touch notes that the open transaction changes live.
func (b *buckets) touch() {
	if !b.dirty {
		b.saved = append(b.saved[:0], b.live...)
		b.dirty = true
	}
}

// next returns the seq of the bucket's next record and counts it.
func (b *buckets) next(end int64) uint32 {
	b.touch()
	i, found := slices.BinarySearchFunc(b.live, end, func(c bucketCount, e int64) int { return cmpInt(c.end, e) })
	if !found {
		b.live = slices.Insert(b.live, i, bucketCount{end: end})
	}
	seq := b.live[i].n
	b.live[i].n++
	return seq
}

// restored notes a record of the bucket read at restore.
func (b *buckets) restored(end int64, seq uint32) {
	i, found := slices.BinarySearchFunc(b.live, end, func(c bucketCount, e int64) int { return cmpInt(c.end, e) })
	if !found {
		b.live = slices.Insert(b.live, i, bucketCount{end: end})
	}
	b.live[i].n = max(b.live[i].n, seq+1)
}

// dead notes a tombstone of the bucket read at restore: the bucket was
// tombstoned whole.
func (b *buckets) dead(end int64) {
	i, found := slices.BinarySearchFunc(b.live, end, func(c bucketCount, e int64) int { return cmpInt(c.end, e) })
	if found {
		b.live = slices.Delete(b.live, i, i+1)
	}
}

// due removes and returns the first live bucket whose every entry expires
// at or before now.
func (b *buckets) due(now int64) (bucketCount, bool) {
	if len(b.live) == 0 || b.live[0].end-1 > now {
		return bucketCount{}, false
	}
	b.touch()
	first := b.live[0]
	b.live = slices.Delete(b.live, 0, 1)
	return first, true
}

func (b *buckets) commit() { b.dirty = false }

func (b *buckets) abort() {
	if b.dirty {
		b.live = append(b.live[:0], b.saved...)
		b.dirty = false
	}
}

func cmpInt(a, b int64) int {
	if a < b {
		return -1
	}
	if a > b {
		return 1
	}
	return 0
}

// openBucket is a bucket record being filled in the open transaction.
type openBucket struct {
	end int64
	n   int    // entries in buf
	buf []byte // the entries, encoded
}

// SeenBatch is a herald.seen/v3 record's value (a bucket or the clock) as
// `herald decode seen-batch` prints it: its times and its entries, each
// as herald.seen/v2 entries print.
type SeenBatch struct {
	Schema     string              `json:"schema"`
	StreamTime int64               `json:"streamTime"`
	SweptTo    int64               `json:"sweptTo"`
	Entries    []schemas.SeenEntry `json:"entries"`
}

// DecodeSeenBatch reads a herald.seen/v3 value.
func DecodeSeenBatch(b []byte) (SeenBatch, error) {
	out := SeenBatch{Schema: SeenBatchV3, Entries: []schemas.SeenEntry{}}
	var m seenpb.SeenEntry
	var err error
	out.StreamTime, out.SweptTo, err = readBatch(b, &m, func(m *seenpb.SeenEntry) {
		var e schemas.SeenEntry
		if derr := schemas.Decode(schemas.AppendSeenProto(nil, m), &e); derr != nil && err == nil {
			err = derr
		}
		out.Entries = append(out.Entries, e)
	})
	if err != nil {
		return SeenBatch{}, fmt.Errorf("dedupe: %w", err)
	}
	return out, nil
}

// SeenEntries is how many seen-set entries a herald.seen record holds:
// those of a bucket record, one of a per-key record, none of a tombstone
// or the clock.
func SeenEntries(r *kgo.Record) (int, error) {
	if r.Value == nil || string(r.Key) == clockKey {
		return 0, nil
	}
	if _, _, ok := parseBucketKey(r.Key); !ok {
		return 1, nil
	}
	var m seenpb.SeenEntry
	n := 0
	if _, _, err := readBatch(r.Value, &m, func(*seenpb.SeenEntry) { n++ }); err != nil {
		return 0, fmt.Errorf("dedupe: seen record %q: %w", r.Key, err)
	}
	return n, nil
}
