// Package kafkacompress owns the producer compression setting every herald
// Kafka client shares: the codec names of Kafka's compression.type and the
// franz-go option that sets one.
//
// The codec is the producer's: a batch is compressed once by the client
// that writes it, stored as is by the broker (a topic's compression.type
// is "producer" unless an operator changes it) and decompressed by each
// consumer. `herald bench --compression` measures the codecs side by side
// on the dedupe stage (BENCHMARKS.md).
package kafkacompress

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Names are the accepted codec names, as Kafka's compression.type spells
// them.
var Names = []string{"none", "gzip", "snappy", "lz4", "zstd"}

// Default is the codec herald's producers use unless configured: snappy,
// franz-go's own default.
const Default = "snappy"

// Codec returns the codec named name (one of Names, any case).
func Codec(name string) (kgo.CompressionCodec, error) {
	switch strings.ToLower(strings.TrimSpace(name)) {
	case "none":
		return kgo.NoCompression(), nil
	case "gzip":
		return kgo.GzipCompression(), nil
	case "snappy":
		return kgo.SnappyCompression(), nil
	case "lz4":
		return kgo.Lz4Compression(), nil
	case "zstd":
		return kgo.ZstdCompression(), nil
	}
	return kgo.CompressionCodec{}, fmt.Errorf("compression %q is not one of %s", name, strings.Join(Names, ", "))
}

// Opt is the client option that makes a producer compress its batches
// with the codec named name. One Opt may serve any number of clients, also
// built concurrently: it carries a compressor built once (safe for
// concurrent use), not kgo.ProducerBatchCompression's codec list, which
// franz-go v1.22 rewrites in place in every NewClient (a data race between
// clients sharing the option).
func Opt(name string) (kgo.Opt, error) { return OptAbove(name, 0) }

// DefaultMinBytes is the smallest batch herald's producers compress
// unless configured (OptAbove): 4 KiB of records.
const DefaultMinBytes = 4 << 10

// OptAbove is Opt for batches of at least minBytes bytes of records; a
// smaller batch is written uncompressed (minBytes 0: every batch is
// compressed). A compressed batch costs the broker, whatever its size, a
// decompression to validate it on every append: for snappy as franz-go
// writes it (a block without the xerial framing) an 8 KB buffer and a copy
// of the records on the heap of a JVM whose young collections pause every
// request it serves. A producer at a moderate rate (an API instance at
// 2,000 sends/s, a stage committing 100 transactions a second) writes
// batches of one to a few records, on which a codec saves a few hundred
// bytes a batch; under load the same producer's batches grow past
// minBytes and are compressed as before (docs/benchmarks-history.md,
// "Request → decision at 2,000/s").
func OptAbove(name string, minBytes int) (kgo.Opt, error) {
	c, err := Codec(name)
	if err != nil {
		return nil, err
	}
	if minBytes < 0 {
		return nil, fmt.Errorf("compression: the smallest batch to compress, %d bytes, is negative", minBytes)
	}
	comp, err := kgo.DefaultCompressor(c)
	if err != nil {
		return nil, fmt.Errorf("compression %q: %w", name, err)
	}
	if comp == nil { // none: DefaultCompressor has no compressor for it
		return kgo.WithCompressor(uncompressed{}), nil
	}
	if minBytes > 0 {
		comp = above{min: minBytes, c: comp}
	}
	return kgo.WithCompressor(comp), nil
}

// above compresses with c the batches of at least min bytes of records
// and leaves smaller ones uncompressed (franz-go writes a batch as it is
// when its compressor returns nil).
type above struct {
	min int
	c   kgo.Compressor
}

func (a above) Compress(dst *bytes.Buffer, src []byte, flags ...kgo.CompressFlag) ([]byte, kgo.CompressionCodecType) {
	if len(src) < a.min {
		return nil, kgo.CodecNone
	}
	return a.c.Compress(dst, src, flags...)
}

// uncompressed is the compressor of "none": it never compresses, and the
// producer then writes its batches as they are.
type uncompressed struct{}

func (uncompressed) Compress(*bytes.Buffer, []byte, ...kgo.CompressFlag) ([]byte, kgo.CompressionCodecType) {
	return nil, kgo.CodecNone
}
