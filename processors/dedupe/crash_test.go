package dedupe

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/topics"
)

// crashWorkload is 100k requests: 70k distinct notifications, 15k exact
// retries (same idempotency key and body) and 15k second calls (same dedupe
// key, another idempotency key), each repeat after its original.
func crashWorkload(rng *rand.Rand) (reqs []schemas.Request, want map[string]int) {
	const originals, retries, seconds = 70_000, 15_000, 15_000
	orig := make([]schemas.Request, originals)
	for i := range orig {
		orig[i] = req(fmt.Sprintf("order %d shipped", i), fmt.Sprintf("order-%d", i), fmt.Sprintf("call-%d-0", i))
		orig[i].Recipient = fmt.Sprintf("u_%d", i%5000)
		orig[i] = retenant(orig[i], "acme")
	}
	// Repeats are scheduled at a later position than their original.
	later := map[int][]schemas.Request{}
	for n, j := range rng.Perm(originals)[:retries+seconds] {
		r := orig[j]
		r.RequestID = identity.NewRandomID()
		if n >= retries {
			r.IdempotencyKey = fmt.Sprintf("call-%d-1", j)
			r.Title = "shipped (from the other code path)"
		}
		at := j + 1 + rng.IntN(3000)
		later[at] = append(later[at], r)
	}
	for i := 0; i <= originals+3000; i++ {
		reqs = append(reqs, later[i]...)
		if i < originals {
			reqs = append(reqs, orig[i])
		}
	}
	return reqs, map[string]int{schemas.DecisionAccepted: originals, schemas.DecisionIdempotentReplay: retries, schemas.DecisionDuplicate: seconds}
}

// instance is one `herald dedupe` process. An instance that exits without
// being killed fails the test: it would otherwise pass for a crash the
// test caused.
// crashSeed is the seed of the workload and the kill schedule: from
// HERALD_TEST_CRASH_SEED when set (to reproduce a failure), else the clock.
func crashSeed(t *testing.T) uint64 {
	seed := uint64(time.Now().UnixNano())
	if env := os.Getenv("HERALD_TEST_CRASH_SEED"); env != "" {
		s, err := strconv.ParseUint(env, 10, 64)
		if err != nil {
			t.Fatalf("HERALD_TEST_CRASH_SEED=%q: %v", env, err)
		}
		seed = s
	}
	t.Logf("seed %d (HERALD_TEST_CRASH_SEED=%d repeats the workload and the kill schedule)", seed, seed)
	return seed
}

func TestExactlyOnceThroughSIGKILLsAndRebalances(t *testing.T) {
	brokers := testenv.Kafka(t)
	bin := testenv.Herald(t)
	const partitions = 6
	cat := testenv.Catalog(t, brokers, partitions)
	logDir := t.TempDir()
	group := "g-" + cat.Name("dedupe")
	rng := rand.New(rand.NewPCG(crashSeed(t), 1))
	reqs, want := crashWorkload(rng)

	// Starts cycle through herald.seen's three forms (--seen-format: v3
	// bucket records, v2 and v1 a record per key) and alternate between
	// writing herald.decision/v2 and herald.accepted/v2 and their JSON
	// versions (--record-format), so partitions move between instances
	// writing any, every restore reads a changelog of all and the
	// decisions checked below are of both, as in a rolling upgrade.
	starts := 0
	inst := testenv.NewInstances(t, bin, logDir, func(id string) []string {
		seenFormat, format := []string{"v3", "v2", "v1"}[starts%3], []string{"v2", "v1"}[starts%2]
		starts++
		return []string{"dedupe", "--brokers", brokers[0], "--topic-prefix", cat.Options().Prefix,
			"--partitions", fmt.Sprint(partitions), "--replication", "1", "--instance-id", id, "--group", group,
			"--batch-interval", "50ms", "--transaction-timeout", "10s", "--seen-format", seenFormat, "--record-format", format}
	})
	inst.Start("i1")
	inst.Start("i2")

	// Produce at a steady pace, so processing and kills overlap.
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(cat.Partitioner()))
		if err != nil {
			t.Error(err)
			return
		}
		defer cl.Close()
		for off := 0; off < len(reqs); off += 2500 {
			var recs []*kgo.Record
			for _, r := range reqs[off:min(off+2500, len(reqs))] {
				b, _ := schemas.Encode(r)
				recs = append(recs, &kgo.Record{Topic: cat.Name(topics.Requests), Key: []byte(r.NotificationID), Value: b})
			}
			if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
				t.Error(err)
				return
			}
			time.Sleep(750 * time.Millisecond)
		}
	}()

	// Kill a random instance with SIGKILL every 0.4–1.6 s and restart it
	// under the same id; bring in a third instance after the fifth kill
	// (a rebalance), until 20 kills are done and production is over.
	kills := inst.KillRandomly(rng, 20, 5, "i3", produced)
	t.Logf("%d SIGKILLs, 3 instances", kills)

	decisions := waitDecisions(t, brokers, cat, len(reqs), 4*time.Minute)
	got := map[string]int{}
	seenDecision := map[string]bool{}
	versions := map[string]int{} // of decisions and accepted notifications
	for _, d := range decisions {
		versions[d.Schema]++
		if seenDecision[d.DecisionID] {
			t.Fatalf("decision %s appears twice", d.DecisionID)
		}
		seenDecision[d.DecisionID] = true
		got[d.Outcome]++
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
	accepted := map[string]int{}
	for _, r := range testenv.ReadCommitted(t, brokers, cat.Name(topics.Accepted)) {
		var a schemas.Accepted
		if err := schemas.Decode(r.Value, &a); err != nil {
			t.Fatal(err)
		}
		if a.Schema != header(r) {
			t.Fatalf("an accepted record named %s in its header reads as %s", header(r), a.Schema)
		}
		versions[a.Schema]++
		accepted[a.NotificationID]++
	}
	var dups int
	for _, n := range accepted {
		if n > 1 {
			dups++
		}
	}
	wantIDs := map[string]bool{}
	for _, r := range reqs {
		wantIDs[r.NotificationID] = true
	}
	missing := 0
	for id := range wantIDs {
		if accepted[id] == 0 {
			missing++
		}
	}
	if dups != 0 || missing != 0 || len(accepted) != len(wantIDs) {
		t.Fatalf("accepted: %d distinct, %d duplicated, %d missing; want %d exactly once", len(accepted), dups, missing, len(wantIDs))
	}
	formats := map[string]int{}
	for _, r := range testenv.ReadCommitted(t, brokers, cat.Name(topics.Seen)) {
		if r.Value != nil {
			formats[header(r)]++
		}
	}
	if formats[schemas.SeenEntryV1] == 0 || formats[schemas.SeenEntryV2] == 0 || formats[SeenBatchV3] == 0 || len(formats) != 3 {
		t.Fatalf("herald.seen records by schema %v: want the three versions, and only them", formats)
	}
	t.Logf("herald.seen entries by schema: %v", formats)
	if len(versions) != 4 {
		t.Fatalf("decisions and accepted notifications by schema %v: want both versions of each", versions)
	}
	t.Logf("decisions and accepted notifications by schema: %v", versions)
}
