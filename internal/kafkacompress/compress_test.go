package kafkacompress_test

import (
	"bytes"
	"strings"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/kafkacompress"
	"github.com/heraldhq/herald/internal/testenv"
)

func TestEachCodecNameWritesBatchesOfThatCodec(t *testing.T) {
	brokers := testenv.Kfake(t).ListenAddrs()
	// Kafka's attribute codes: none 0, gzip 1, snappy 2, lz4 3, zstd 4.
	want := map[string]uint8{"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
	if len(want) != len(kafkacompress.Names) {
		t.Fatalf("Names %v, want the five codecs of compression.type", kafkacompress.Names)
	}
	value := bytes.Repeat([]byte(`{"tenant":"acme","type":"invoice.paid"}`), 100) // compresses well
	for _, name := range kafkacompress.Names {
		t.Run("a producer with "+name+" writes "+name+" batches", func(t *testing.T) {
			opt, err := kafkacompress.Opt(strings.ToUpper(name)) // any case
			if err != nil {
				t.Fatal(err)
			}
			topic := testenv.Topic(t, brokers, 1, nil)
			cl := testenv.Client(t, brokers, opt)
			if err := cl.ProduceSync(testenv.Guarded(t), &kgo.Record{Topic: topic, Value: value}).FirstErr(); err != nil {
				t.Fatal(err)
			}
			recs := testenv.ReadCommitted(t, brokers, topic)
			if len(recs) != 1 || !bytes.Equal(recs[0].Value, value) {
				t.Fatalf("read %d records back, want the one written, intact", len(recs))
			}
			if got := recs[0].Attrs.CompressionType(); got != want[name] {
				t.Fatalf("batch codec %d, want %d (%s)", got, want[name], name)
			}
		})
	}
}

func TestAnUnknownCodecIsRefusedWithTheChoices(t *testing.T) {
	for _, name := range []string{"", "lz5", "snappy,lz4"} {
		t.Run("the name "+strings.TrimSpace(name+" ")+"is refused", func(t *testing.T) {
			_, err := kafkacompress.Opt(name)
			if err == nil || !strings.Contains(err.Error(), "none, gzip, snappy, lz4, zstd") {
				t.Fatalf("Opt(%q): %v, want an error naming the choices", name, err)
			}
		})
	}
}

func TestTheDefaultIsACodecName(t *testing.T) {
	if _, err := kafkacompress.Codec(kafkacompress.Default); err != nil {
		t.Fatal(err)
	}
}

func TestOneOptServesClientsBuiltConcurrently(t *testing.T) {
	// Under -race: the stages of one process build their clients from one
	// set of options at the same time.
	brokers := testenv.Kfake(t).ListenAddrs()
	for _, name := range kafkacompress.Names {
		t.Run("the "+name+" option is shared by eight clients built at once", func(t *testing.T) {
			opt, err := kafkacompress.Opt(name)
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), opt)
					if err != nil {
						t.Error(err)
						return
					}
					cl.Close()
				}()
			}
			wg.Wait()
		})
	}
}

func TestABatchBelowTheMinimumIsWrittenUncompressed(t *testing.T) {
	brokers := testenv.Kfake(t).ListenAddrs()
	small := bytes.Repeat([]byte(`{"tenant":"acme"}`), 10)  // 170 bytes: compresses, but under the minimum
	large := bytes.Repeat([]byte(`{"tenant":"acme"}`), 300) // 5,100 bytes
	for _, c := range []struct {
		name     string
		min      int
		value    []byte
		wantAttr uint8
	}{
		{"a batch smaller than the minimum is written uncompressed", 1024, small, 0},
		{"a batch at least the minimum is written with the codec", 1024, large, 2},
		{"with a minimum of 0 every batch is compressed", 0, small, 2},
		{"the default minimum leaves a batch of one small record uncompressed", kafkacompress.DefaultMinBytes, small, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			opt, err := kafkacompress.OptAbove("snappy", c.min)
			if err != nil {
				t.Fatal(err)
			}
			topic := testenv.Topic(t, brokers, 1, nil)
			cl := testenv.Client(t, brokers, opt)
			if err := cl.ProduceSync(testenv.Guarded(t), &kgo.Record{Topic: topic, Value: c.value}).FirstErr(); err != nil {
				t.Fatal(err)
			}
			recs := testenv.ReadCommitted(t, brokers, topic)
			if len(recs) != 1 || !bytes.Equal(recs[0].Value, c.value) {
				t.Fatalf("read %d records back, want the one written, intact", len(recs))
			}
			if got := recs[0].Attrs.CompressionType(); got != c.wantAttr {
				t.Fatalf("batch codec %d, want %d", got, c.wantAttr)
			}
		})
	}
}

func TestANegativeMinimumIsRefused(t *testing.T) {
	if _, err := kafkacompress.OptAbove("snappy", -1); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Fatalf("OptAbove(snappy, -1): %v, want an error saying it is negative", err)
	}
}
