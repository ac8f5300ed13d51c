package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/testenv"
)

func TestKafkaCompressionMinBytesReachesTheProducers(t *testing.T) {
	brokers := testenv.Kfake(t).ListenAddrs()
	value := bytes.Repeat([]byte(`{"tenant":"acme","type":"invoice.paid"}`), 20) // 780 bytes, compresses well
	for _, tc := range []struct {
		name     string
		args     []string
		wantAttr uint8 // Kafka's codec attribute: none 0, snappy 2
	}{
		{"by default a batch of one small record is written uncompressed", nil, 0},
		{"0 compresses every batch", []string{"--kafka-compression-min-bytes", "0"}, 2},
		{"a minimum below the batch compresses it", []string{"--kafka-compression-min-bytes", "512"}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := newFlagSet("api")
			var kf kafkaFlags
			kf.register(fs)
			if err := parseFlags(fs, tc.args); err != nil {
				t.Fatal(err)
			}
			opts, err := kf.clientOpts()
			if err != nil {
				t.Fatal(err)
			}
			topic := testenv.Topic(t, brokers, 1, nil)
			cl := testenv.Client(t, brokers, opts...)
			if err := cl.ProduceSync(testenv.Guarded(t), &kgo.Record{Topic: topic, Value: value}).FirstErr(); err != nil {
				t.Fatal(err)
			}
			recs := testenv.ReadCommitted(t, brokers, topic)
			if len(recs) != 1 || !bytes.Equal(recs[0].Value, value) {
				t.Fatalf("read %d records back, want the one written, intact", len(recs))
			}
			if got := recs[0].Attrs.CompressionType(); got != tc.wantAttr {
				t.Fatalf("batch codec %d, want %d", got, tc.wantAttr)
			}
		})
	}
	t.Run("a negative minimum is refused naming the flag", func(t *testing.T) {
		var out, errb bytes.Buffer
		code := run(t.Context(), []string{"api", "--brokers", "127.0.0.1:1", "--kafka-compression-min-bytes", "-1"}, &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), "--kafka-compression-min-bytes must be at least 0") {
			t.Fatalf("exit %d, stderr %q; want 2 and a message naming --kafka-compression-min-bytes", code, errb.String())
		}
	})
}
