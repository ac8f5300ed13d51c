package fallback_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/processors/fallback"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/topics"
)

// crashRecord is one record of the workload on herald.fallback.
type crashRecord struct {
	key string
	v   schemas.Record
	at  time.Time
	// mark: a watermark, for partition part.
	mark bool
	part int32
}

// crashWorkload is n notifications a minute apart, each a plan (one or
// two pushes, or none; then an email step "if failed", "after 10m unless
// displayed" or both, and for some a feed step with no condition),
// outcomes of its pushes (delivered, device_retired or failed, one
// sometimes never) and for some a displayed receipt before or after the
// email step's time; then, per partition, a record far later, so every
// partition's stream time passes every timer. Sorted by record time.
func crashWorkload(rng *rand.Rand, n, partitions int, base time.Time) []crashRecord {
	var out []crashRecord
	statuses := []string{schemas.OutcomeDelivered, schemas.OutcomeDeviceRetired, schemas.OutcomeFailed}
	for k := range n {
		t0 := base.Add(time.Duration(k) * time.Minute)
		nid := identity.DedupeID("acme", "invoice.paid", fmt.Sprint("u", k%200), fmt.Sprint(k))
		occ := identity.NewRandomID()
		var pushes []string
		for i := range rng.IntN(3) {
			pushes = append(pushes, identity.DeliveryID(occ, fmt.Sprint("ios", i)))
		}
		mail := schemas.FallbackStep{Channels: []string{"email"}}
		switch rng.IntN(3) {
		case 0:
			mail.IfFailed = true
		case 1:
			mail.AfterMs, mail.Unless = 10*60_000, []string{schemas.ReceiptDisplayed}
		default:
			mail.IfFailed, mail.AfterMs, mail.Unless = true, 10*60_000, []string{schemas.ReceiptDisplayed, schemas.ReceiptOpened}
		}
		mailID := identity.DeliveryID(occ, "inbox")
		mail.Deliveries = []string{mailID}
		mail.Commands = []schemas.DeliveryCommand{{DeliveryID: mailID, NotificationID: nid, OccurrenceID: occ, Tenant: "acme", Type: "invoice.paid",
			Recipient: "u", DeviceID: "inbox", Channel: "email", Token: "u@example.com", CollapseID: nid, Title: "t", CreatedAt: t0.UnixMilli()}}
		plan := &schemas.Fallback{NotificationID: nid, OccurrenceID: occ, Tenant: "acme", Type: "invoice.paid", Recipient: "u", PlannedAt: t0.UnixMilli(),
			FirstAt: t0.UnixMilli(), Steps: []schemas.FallbackStep{
				{Channels: []string{"apns"}, Deliveries: pushes, State: schemas.FallbackFired, At: t0.UnixMilli()}, mail}}
		if rng.IntN(2) == 0 {
			feedID := identity.DeliveryID(occ, "feed")
			plan.Steps = append(plan.Steps, schemas.FallbackStep{Channels: []string{"feed"}, Deliveries: []string{feedID},
				Commands: []schemas.DeliveryCommand{{DeliveryID: feedID, NotificationID: nid, OccurrenceID: occ, Tenant: "acme", Type: "invoice.paid",
					Recipient: "u", DeviceID: "feed", Channel: "feed", CollapseID: nid, Title: "t", CreatedAt: t0.UnixMilli()}}})
		}
		out = append(out, crashRecord{key: nid, v: plan, at: t0})
		for i, p := range pushes {
			if i == 1 && rng.IntN(8) == 0 {
				continue // never ends: an if-failed step waits
			}
			at := t0.Add(time.Duration(1+rng.IntN(300)) * time.Second)
			out = append(out, crashRecord{key: nid, v: &schemas.Outcome{DeliveryID: p, NotificationID: nid, OccurrenceID: occ, Tenant: "acme",
				Type: "invoice.paid", Recipient: "u", DeviceID: fmt.Sprint("ios", i), Channel: "apns", Status: statuses[rng.IntN(len(statuses))],
				Attempts: 1, At: at.UnixMilli()}, at: at})
		}
		if len(pushes) > 0 && rng.IntN(3) == 0 {
			at := t0.Add(time.Duration(rng.IntN(20*60)) * time.Second)
			out = append(out, crashRecord{key: nid, v: &schemas.Receipt{ReceiptID: identity.ReceiptID(pushes[0], schemas.ReceiptDisplayed),
				Kind: schemas.ReceiptDisplayed, DeliveryID: pushes[0], NotificationID: nid, Tenant: "acme", Type: "invoice.paid", Recipient: "u",
				DeviceID: "ios0", Channel: "webpush", At: at.UnixMilli()}, at: at})
		}
	}
	end := base.Add(time.Duration(n)*time.Minute + 24*time.Hour)
	for at := base; ; at = at.Add(5 * time.Minute) {
		if at.After(base.Add(time.Duration(n) * time.Minute)) {
			at = end
		}
		var w schemas.FallbackWatermark
		for _, k := range fallback.Kinds {
			w.Marks = append(w.Marks, schemas.FallbackMark{Kind: k, Partition: 0, Partitions: 1, At: at.UnixMilli()})
		}
		for p := range int32(partitions) {
			out = append(out, crashRecord{key: "watermark/test", v: &w, at: at, mark: true, part: p})
		}
		if at == end {
			break
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].at.Equal(out[j].at) {
			return !out[i].mark && out[j].mark
		}
		return out[i].at.Before(out[j].at)
	})
	return out
}

// partition is where c goes among n partitions.
func (c crashRecord) partition(n int) int32 {
	if c.mark {
		return c.part
	}
	return topics.PartitionOf(c.key, n)
}

func (c crashRecord) record(t *testing.T, topic string) *kgo.Record {
	r := encoded(t, topic, c.key, c.v)
	r.Timestamp = c.at
	r.Partition = c.part
	return r
}

// crashModel runs the workload through Tasks in process, one per
// partition, ticking and committing after every record: the outputs of a
// stage that never crashes. It returns the decisions by id (outcome,
// detail, deliveries) and the delivery commands by id, counted.
// loseEvery > 0 replaces partition 0's task by an empty one after every
// loseEvery of its records (restarts that failed to restore).
func crashModel(t *testing.T, work []crashRecord, tp fallback.Topics, partitions, loseEvery int) (map[string]string, map[string]int) {
	tasks := map[int32]*fallback.Task{}
	offsets := map[int32]int64{}
	decisions, commands := map[string]string{}, map[string]int{}
	for _, w := range work {
		p := w.partition(partitions)
		if tasks[p] == nil || p == 0 && loseEvery > 0 && offsets[p] > 0 && int(offsets[p])%loseEvery == 0 {
			tasks[p] = fallback.NewTask(tp, p, 0, nil)
		}
		r := w.record(t, tp.Fallback)
		r.Partition, r.Offset = p, offsets[p]
		offsets[p]++
		var out stage.Out
		if err := tasks[p].Process(r, &out); err != nil {
			t.Fatal(err)
		}
		tasks[p].Tick(&out)
		tasks[p].Commit()
		for _, o := range out.Records() {
			collect(t, tp, o, decisions, commands)
		}
	}
	return decisions, commands
}

func collect(t *testing.T, tp fallback.Topics, r *kgo.Record, decisions map[string]string, commands map[string]int) {
	t.Helper()
	switch r.Topic {
	case tp.Decisions:
		var d schemas.Decision
		if err := schemas.Decode(r.Value, &d); err != nil {
			t.Fatal(err)
		}
		if _, dup := decisions[d.DecisionID]; dup {
			t.Errorf("decision %s written twice", d.DecisionID)
		}
		decisions[d.DecisionID] = fmt.Sprintf("%s | %s | %d | %v", d.Outcome, d.Detail, d.At, d.Deliveries)
	case tp.Deliveries["email"], tp.Deliveries["feed"]:
		var c schemas.DeliveryCommand
		if err := schemas.Decode(r.Value, &c); err != nil {
			t.Fatal(err)
		}
		commands[c.DeliveryID+"/"+c.Channel+"/"+fmt.Sprint(c.CreatedAt)]++
	}
}

// TestEachFallbackStepFiresExactlyOnceThroughSIGKILLsAndRebalances runs
// `herald fallback` as processes on the real broker, SIGKILLs one at
// random every 0.4–1.6 s and restarts it, with a third instance joining
// after the fourth kill, while the workload is written to herald.fallback;
// then every step's decision and every fired step's command must have been
// committed exactly once, as the crash-free model decides them.
func TestEachFallbackStepFiresExactlyOnceThroughSIGKILLsAndRebalances(t *testing.T) {
	brokers := testenv.Kafka(t)
	bin := testenv.Herald(t)
	const partitions = 4
	cat := testenv.Catalog(t, brokers, partitions)
	tp := fallback.TopicsOf(cat)
	group := "g-" + cat.Name("fallback")
	logDir := t.TempDir()
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 3))
	t.Logf("seed %d", seed)

	// Inside the topics' retention, before now, and shorter than the
	// stage's MaxOpen (7 days), so nothing expires.
	base := time.Now().Add(-100 * time.Hour).Truncate(time.Hour)
	work := crashWorkload(rng, 1500, partitions, base)
	wantDecisions, wantCommands := crashModel(t, work, tp, partitions, -1)
	t.Run("the workload notices a stage that loses its state", func(t *testing.T) {
		lostD, lostC := crashModel(t, work, tp, partitions, 50)
		if fmt.Sprint(lostD) == fmt.Sprint(wantDecisions) && fmt.Sprint(lostC) == fmt.Sprint(wantCommands) {
			t.Fatal("losing partition 0's state changes no output: the comparison below could not catch it")
		}
	})
	byOutcome := map[string]int{}
	for _, d := range wantDecisions {
		o, _, _ := strings.Cut(d, " | ")
		byOutcome[o]++
	}
	t.Logf("model: %d records, %d decisions %v, %d commands", len(work), len(wantDecisions), byOutcome, len(wantCommands))
	for k, n := range wantCommands {
		if n != 1 {
			t.Fatalf("the model sends %s %d times", k, n)
		}
	}

	inst := testenv.NewInstances(t, bin, logDir, func(id string) []string {
		return []string{"fallback", "--brokers", brokers[0], "--topic-prefix", cat.Options().Prefix,
			"--partitions", fmt.Sprint(partitions), "--replication", "1", "--instance-id", id, "--group", group,
			"--batch-interval", "50ms", "--transaction-timeout", "10s", "--fallback-chains", "invoice.paid=push > email if failed",
			// The forwarders (of empty topics) write no watermark: the
			// workload's are the only ones, as in the model.
			"--mark-interval", "100000h"}
	})
	inst.Start("i1")
	inst.Start("i2")

	produced := make(chan struct{})
	go func() {
		defer close(produced)
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(fallback.Partitioner(cat)))
		if err != nil {
			t.Error(err)
			return
		}
		defer cl.Close()
		for off := 0; off < len(work); off += 400 {
			var recs []*kgo.Record
			for _, w := range work[off:min(off+400, len(work))] {
				recs = append(recs, w.record(t, tp.Fallback))
			}
			if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
				t.Error(err)
				return
			}
			time.Sleep(400 * time.Millisecond)
		}
	}()

	kills := inst.KillRandomly(rng, 10, 4, "i3", produced)
	t.Logf("%d SIGKILLs, 3 instances", kills)

	// Wait until every decision is in, or nothing has come for two
	// minutes (a slow machine; a stuck stage is not).
	last, lastChange := -1, time.Now()
	var gotDecisions map[string]string
	var gotCommands map[string]int
	for {
		time.Sleep(3 * time.Second)
		gotDecisions, gotCommands = map[string]string{}, map[string]int{}
		for _, topic := range []string{tp.Decisions, tp.Deliveries["email"], tp.Deliveries["feed"]} {
			for _, r := range testenv.ReadCommitted(t, brokers, topic) {
				collect(t, tp, r, gotDecisions, gotCommands)
			}
		}
		if t.Failed() {
			t.FailNow() // a decision written twice
		}
		if n := len(gotDecisions); n != last {
			last, lastChange = n, time.Now()
		}
		if last >= len(wantDecisions) || time.Since(lastChange) > 2*time.Minute {
			break
		}
	}
	diffs := 0
	report := func(format string, args ...any) {
		if diffs++; diffs <= 10 {
			t.Errorf(format, args...)
		}
	}
	for id, d := range wantDecisions {
		if gotDecisions[id] != d {
			report("decision %s:\n got  %q\n want %q", id, gotDecisions[id], d)
		}
	}
	for id, d := range gotDecisions {
		if _, ok := wantDecisions[id]; !ok {
			report("unexpected decision %s: %q", id, d)
		}
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range wantCommands {
			if !yield(k) {
				return
			}
		}
	})
	for _, k := range keys {
		if gotCommands[k] != 1 {
			report("command %s committed %d times, want once", k, gotCommands[k])
		}
	}
	if len(gotCommands) != len(wantCommands) {
		report("%d distinct commands, want %d", len(gotCommands), len(wantCommands))
	}
	if diffs > 0 {
		t.Fatalf("%d differences from the crash-free model; logs in %s", diffs, logDir)
	}
}
