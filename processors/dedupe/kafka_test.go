package dedupe

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/schemas/seenpb"
	"github.com/heraldhq/herald/topics"
)

// runStage runs one in-process instance until the test ends.
func runStage(t *testing.T, brokers []string, cat *topics.Catalog, instance string, p Policy) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		err := Run(ctx, Options{Instance: stage.Instance{Brokers: brokers, Group: "g-" + cat.Name(""), InstanceID: instance}, Catalog: cat, Policy: p})
		if err != nil {
			t.Errorf("stage %s: %v", instance, err)
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// produceRequests writes requests the way the SDK does: keyed by
// notification id, with the catalog's partitioner, record time at.
func produceRequests(t *testing.T, brokers []string, cat *topics.Catalog, reqs []schemas.Request, at func(i int) time.Time) {
	t.Helper()
	cl := testenv.Client(t, brokers, kgo.RecordPartitioner(cat.Partitioner()), kgo.ProducerLinger(5*time.Millisecond))
	var recs []*kgo.Record
	for i, r := range reqs {
		b, err := schemas.Encode(r)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, &kgo.Record{Topic: cat.Name(topics.Requests), Key: []byte(r.NotificationID), Value: b, Timestamp: at(i)})
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// waitDecisions reads decisions until n are committed, then returns them,
// failing if more than n appear.
func waitDecisions(t *testing.T, brokers []string, cat *topics.Catalog, n int, limit time.Duration) []schemas.Decision {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		recs := testenv.ReadCommitted(t, brokers, cat.Name(topics.Decisions))
		if len(recs) >= n || time.Now().After(deadline) {
			if len(recs) != n {
				t.Fatalf("%d decisions, want %d", len(recs), n)
			}
			out := make([]schemas.Decision, len(recs))
			for i, r := range recs {
				if err := schemas.Decode(r.Value, &out[i]); err != nil {
					t.Fatal(err)
				}
			}
			return out
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// retenant moves a request to another tenant, recomputing its id.
func retenant(r schemas.Request, tenant string) schemas.Request {
	r.Tenant = tenant
	switch r.IDSource {
	case "dedupe_key":
		r.NotificationID = identity.DedupeID(r.Tenant, r.Type, r.Recipient, r.DedupeKey)
	case "idempotency_key":
		r.NotificationID = identity.IdempotencyID(r.Tenant, r.Type, r.Recipient, r.IdempotencyKey)
	}
	return r
}

func TestSeedScenariosOnTheRealBroker(t *testing.T) {
	brokers := testenv.Kafka(t)
	cat := testenv.Catalog(t, brokers, 3)
	runStage(t, brokers, cat, "i1", seedPolicy)

	// Each scenario runs as its own tenant, so their keys never meet, and in
	// its own two days, so record time only grows along each partition (as it
	// does in production: stream time drives expiry).
	scenarios := seedScenarios()
	base := time.Now().Add(-time.Duration(2*len(scenarios)+1) * 24 * time.Hour).Truncate(time.Second)
	var reqs []schemas.Request
	var times []time.Time
	want := map[string]string{} // request id → outcome
	scenarioOf := map[string]string{}
	for i, sc := range scenarios {
		for j, s := range sc.reqs {
			r := retenant(s.r, fmt.Sprintf("tenant-%d", i))
			r.RequestID = identity.NewRandomID() // every send is its own call
			reqs = append(reqs, r)
			times = append(times, base.Add(time.Duration(2*i)*24*time.Hour+s.at))
			want[r.RequestID] = sc.want[j]
			scenarioOf[r.RequestID] = sc.name
		}
	}
	produceRequests(t, brokers, cat, reqs, func(i int) time.Time { return times[i] })
	for _, d := range waitDecisions(t, brokers, cat, len(reqs), time.Minute) {
		if d.Outcome != want[d.RequestID] {
			t.Errorf("%s: request %s was %s, want %s", scenarioOf[d.RequestID], d.RequestID, d.Outcome, want[d.RequestID])
		}
	}
	var accepted int
	for _, w := range want {
		if w == schemas.DecisionAccepted {
			accepted++
		}
	}
	if got := len(testenv.ReadCommitted(t, brokers, cat.Name(topics.Accepted))); got != accepted {
		t.Fatalf("%d accepted notifications, want %d", got, accepted)
	}
}

func TestTheSeenSetTopicKeepsOnlyLiveKeys(t *testing.T) {
	brokers := testenv.Kafka(t)
	cat := testenv.Catalog(t, brokers, 2)
	p := Policy{DefaultWindowMs: 1000, IdempotencyTTLMs: 1000}
	runStage(t, brokers, cat, "i1", p)

	// 40 keys at t=0..39 ms; then 10 keys at t=2 min, which pushes stream
	// time past the first 40's windows and the end of their expiry bucket
	// in both partitions.
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	var reqs []schemas.Request
	var times []time.Time
	for i := 0; i < 50; i++ {
		r := req("x", fmt.Sprintf("k%d", i), "")
		reqs = append(reqs, r)
		at := base.Add(time.Duration(i) * time.Millisecond)
		if i >= 40 {
			at = base.Add(2 * time.Minute)
		}
		times = append(times, at)
	}
	// The 40 first, decided (and their bucket records written) before the
	// 10 come: in one transaction with them, entries due by its end would
	// not be written at all.
	produceRequests(t, brokers, cat, reqs[:40], func(i int) time.Time { return times[i] })
	waitDecisions(t, brokers, cat, 40, time.Minute)
	produceRequests(t, brokers, cat, reqs[40:], func(i int) time.Time { return times[40+i] })
	waitDecisions(t, brokers, cat, len(reqs), time.Minute)

	latest := map[string][]byte{} // by partition and key: each partition numbers its own bucket records
	for _, r := range testenv.ReadCommitted(t, brokers, cat.Name(topics.Seen)) {
		latest[fmt.Sprintf("%d %s", r.Partition, r.Key)] = r.Value
	}
	// The records are bucket records (batch.go): a key is live while a
	// record holding it is.
	var live, tombstoned int
	var m seenpb.SeenEntry
	for pk, v := range latest {
		_, key, _ := strings.Cut(pk, " ")
		if _, _, ok := parseBucketKey([]byte(key)); !ok {
			continue // the clock
		}
		if v == nil {
			tombstoned++
			continue
		}
		if _, _, err := readBatch(v, &m, func(m *seenpb.SeenEntry) {
			live++
			if m.ExpiresAt <= base.Add(2*time.Minute).UnixMilli() {
				t.Errorf("key %x expired at %d but its record %s has no tombstone", m.Scope, m.ExpiresAt, key)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	// Each partition's stream time reaches 2 min only if one of the last
	// ten keys lands in it; with 2 partitions and 10 keys that is all but
	// certain, and the assertion above is exact either way.
	if live != 10 {
		t.Fatalf("%d live keys; want the 10 newest", live)
	}
	if tombstoned == 0 {
		t.Fatal("no bucket record was tombstoned")
	}
}
