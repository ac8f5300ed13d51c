package sinks_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/metrics"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks"
	"github.com/heraldhq/herald/sinks/apns"
	"github.com/heraldhq/herald/sinks/apns/emulator"
	"github.com/heraldhq/herald/sinks/sinktest"
	"github.com/heraldhq/herald/topics"
)

// TestARevokedPartitionLeavesTheInstanceAndComesBackRestored runs two sink
// instances in one group on the real broker. Instance a owns both
// partitions, each with parked deliveries; instance b joins and takes one:
// a forgets that partition (its parked-deliveries gauge is gone, not left
// at its last value) and keeps the other. When b stops, a gets the
// partition back and restores it afresh: the gauge shows the parked
// deliveries again, with the one b parked meanwhile, read from the state
// topic.
func TestARevokedPartitionLeavesTheInstanceAndComesBackRestored(t *testing.T) {
	brokers := testenv.Kafka(t)
	cat := testenv.Catalog(t, brokers, 2)
	em, err := emulator.Start(emulator.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { em.Close() })
	prov, err := apns.New(apns.Config{Host: em.URL(), RootCAs: em.RootCAs(), Topic: "com.example.app"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prov.CloseIdleConnections)
	start := func(id string, reg *metrics.Registry) (stop func()) {
		return sinktest.Start(t, sinks.Options{Instance: stage.Instance{Brokers: brokers, InstanceID: id, Metrics: reg}, Channel: "apns", Provider: prov, Catalog: cat})
	}

	regA, regB := metrics.NewRegistry(), metrics.NewRegistry()
	start("a", regA)
	// Parked deliveries (not before an hour from now) on both partitions.
	cl := testenv.Client(t, brokers, kgo.RecordPartitioner(cat.Partitioner()))
	want := map[string]float64{}
	for i := range 20 {
		want[produceParked(t, cl, cat, fmt.Sprintf("parked-%d", i))]++
	}
	if len(want) != 2 {
		t.Fatalf("parked deliveries per partition %v: the test needs both partitions", want)
	}
	awaitParked(t, "instance a owns both partitions", regA, want)

	stopB := start("b", regB)
	awaitPartitions(t, regA, 1)
	awaitPartitions(t, regB, 1)
	gotB := awaitParkedCount(t, regB, 1)
	var moved, kept string
	for p := range gotB {
		moved = p
	}
	for p := range want {
		if p != moved {
			kept = p
		}
	}
	t.Run("the instance that lost a partition exports nothing of it", func(t *testing.T) {
		got := parkedSeries(t, regA)
		if v, ok := got[moved]; ok {
			t.Errorf("instance a still exports %v parked deliveries of partition %s, revoked", v, moved)
		}
		if got[kept] != want[kept] {
			t.Errorf("instance a exports %v parked deliveries of partition %s, want %v", got[kept], kept, want[kept])
		}
	})
	t.Run("the instance that took it restored its parked deliveries", func(t *testing.T) {
		if gotB[moved] != want[moved] {
			t.Errorf("instance b exports %v parked deliveries of partition %s, want %v", gotB[moved], moved, want[moved])
		}
	})

	// While b owns the moved partition, its state changes: one more parked
	// delivery, which a can only know by restoring the partition.
	for i := 0; ; i++ {
		p := produceParked(t, cl, cat, fmt.Sprintf("later-%d", i))
		want[p]++
		if p == moved {
			break
		}
	}
	wantB := map[string]float64{moved: want[moved]}
	awaitParked(t, "instance b parked the later delivery", regB, wantB)

	stopB()
	awaitPartitions(t, regA, 2)
	t.Run("a partition that comes back is restored afresh", func(t *testing.T) {
		awaitParked(t, "instance a owns both partitions again", regA, want)
	})
}

// produceParked writes a delivery command not to be sent before an hour
// from now, and returns its partition.
func produceParked(t *testing.T, cl *kgo.Client, cat *topics.Catalog, name string) string {
	t.Helper()
	c := deliveryCmd(name, "dev-"+name)
	c.NotBefore = time.Now().Add(time.Hour).UnixMilli()
	b, err := schemas.Encode(c)
	if err != nil {
		t.Fatal(err)
	}
	res := cl.ProduceSync(context.Background(), &kgo.Record{Topic: cat.Name(topics.Deliveries("apns")), Key: []byte(c.DeliveryID), Value: b})
	if err := res.FirstErr(); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(res[0].Record.Partition)
}

// parkedSeries is the herald_sink_parked_deliveries gauge of a registry,
// by partition: only the series it exports.
func parkedSeries(t *testing.T, reg *metrics.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "herald_sink_parked_deliveries" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "partition" {
					out[l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	return out
}

func awaitParked(t *testing.T, what string, reg *metrics.Registry, want map[string]float64) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		got := parkedSeries(t, reg)
		if fmt.Sprint(got) == fmt.Sprint(want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: parked deliveries by partition %v, want %v", what, got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func awaitParkedCount(t *testing.T, reg *metrics.Registry, n int) map[string]float64 {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		got := parkedSeries(t, reg)
		if len(got) == n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("parked deliveries exported for partitions %v, want %d partitions", got, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func awaitPartitions(t *testing.T, reg *metrics.Registry, n int64) {
	t.Helper()
	g := reg.Gauge("herald_stage_partitions", "", "stage", "sink-apns")
	deadline := time.Now().Add(time.Minute)
	for g.Value() != n {
		if time.Now().After(deadline) {
			t.Fatalf("instance owns %d partitions, want %d", g.Value(), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
