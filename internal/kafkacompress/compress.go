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
func Opt(name string) (kgo.Opt, error) {
	c, err := Codec(name)
	if err != nil {
		return nil, err
	}
	comp, err := kgo.DefaultCompressor(c)
	if err != nil {
		return nil, fmt.Errorf("compression %q: %w", name, err)
	}
	if comp == nil { // none: DefaultCompressor has no compressor for it
		return kgo.WithCompressor(uncompressed{}), nil
	}
	return kgo.WithCompressor(comp), nil
}

// uncompressed is the compressor of "none": it never compresses, and the
// producer then writes its batches as they are.
type uncompressed struct{}

func (uncompressed) Compress(*bytes.Buffer, []byte, ...kgo.CompressFlag) ([]byte, kgo.CompressionCodecType) {
	return nil, kgo.CodecNone
}
