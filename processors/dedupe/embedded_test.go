package dedupe

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/heraldhq/herald/internal/embedded"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/topics"
)

func TestNewRefusesOptionsWithoutCatalogOrInstance(t *testing.T) {
	cat := topics.New(topics.Options{Partitions: 1})
	for _, c := range []struct {
		name string
		o    Options
	}{
		{"without a catalog it refuses to start", Options{Instance: stage.Instance{Brokers: []string{"127.0.0.1:1"}, InstanceID: "i1"}}},
		{"without an instance id it refuses to start", Options{Instance: stage.Instance{Brokers: []string{"127.0.0.1:1"}}, Catalog: cat}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := Run(context.Background(), c.o); err == nil {
				t.Fatal("Run started")
			}
		})
	}
}

// TestTheStageWithItsDefaultsOnAnEmbeddedCluster runs the stage as `herald
// dev` does, in process on kfake (a fast test; the exactly-once claims are
// proven on the real broker in kafka_test.go and crash_test.go).
func TestTheStageWithItsDefaultsOnAnEmbeddedCluster(t *testing.T) {
	c := testenv.Kfake(t)
	brokers := c.ListenAddrs()
	cat := testenv.CatalogWith(t, brokers, embedded.CatalogOptions(time.Hour))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		// No group and a zero policy: "herald-dedupe" and DefaultPolicy.
		if err := Run(ctx, Options{
			Instance: stage.Instance{Brokers: brokers, InstanceID: "i1", ClientOpts: embedded.ClientOpts(), BatchInterval: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)},
			Catalog:  cat,
		}); err != nil {
			t.Errorf("stage: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })

	// Two sends 30 minutes apart: one dedupe window (the default hour).
	first, second := req("paid", "inv_1", ""), req("paid again", "inv_1", "")
	now := time.Now()
	produceRequests(t, brokers, cat, []schemas.Request{first, second}, func(i int) time.Time { return now.Add(time.Duration(i) * 30 * time.Minute) })
	var outcomes []string
	for _, d := range waitDecisions(t, brokers, cat, 2, time.Minute) {
		outcomes = append(outcomes, d.Outcome)
	}
	slices.Sort(outcomes)
	if want := []string{schemas.DecisionAccepted, schemas.DecisionDuplicate}; !slices.Equal(outcomes, want) {
		t.Fatalf("outcomes %v, want %v (the default window)", outcomes, want)
	}
	groups, err := kadm.NewClient(testenv.Client(t, brokers)).ListGroups(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := groups["herald-dedupe"]; !ok {
		t.Fatalf("groups %v, want the default herald-dedupe", groups.Groups())
	}
}
