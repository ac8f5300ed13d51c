package route

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/topics"
)

// crashPolicy is what the killed processes are started with (crashArgs).
var crashPolicy = Policy{
	Rates:   map[string]RateLimit{"rated": {Max: 3, WindowMs: 3600_000}},
	Digests: map[string]Digest{"digest": {WindowMs: 15 * 60_000}},
	Urgent:  map[string]bool{"alert": true},
}

var crashArgs = []string{"--rate-limits", "rated=3/1h", "--digests", "digest=15m", "--urgent-types", "alert",
	// Timers fire on stream time only, as in the model below.
	"--timer-grace", "100000h"}

// crashWorld is 300 recipients: every fifth has two iPhones, an Android
// phone and a browser; others one device, two, none, or an iPhone with
// APNs opted out; every third sleeps 22:00–07:00 in Paris.
func crashWorld() (StaticDirectory, []string) {
	dir := StaticDirectory{}
	var users []string
	for i := range 300 {
		u := fmt.Sprintf("u_%d", i)
		users = append(users, u)
		d := func(id, platform string) schemas.Device {
			return schemas.Device{Tenant: "acme", Recipient: u, DeviceID: u + "-" + id, Platform: platform, Token: "t-" + u + id, Enabled: true}
		}
		var who Recipient
		switch i % 5 {
		case 0:
			who.Devices = []schemas.Device{d("ios1", "ios"), d("ios2", "ios"), d("pixel", "android"), d("chrome", "web")}
		case 1:
			who.Devices = []schemas.Device{d("ios1", "ios")}
		case 2:
			who.Devices = []schemas.Device{d("pixel", "android"), d("chrome", "web")}
		case 4:
			who.Devices = []schemas.Device{d("ios1", "ios")}
			who.Prefs = &schemas.Preferences{Channels: map[string]bool{"apns": false}}
		}
		if i%3 == 0 {
			if who.Prefs == nil {
				who.Prefs = &schemas.Preferences{}
			}
			who.Prefs.QuietHours = &schemas.QuietHours{Start: "22:00", End: "07:00", TimeZone: "Europe/Paris"}
		}
		if who.Prefs != nil {
			who.Prefs.Tenant, who.Prefs.Recipient = "acme", u
		}
		sort.Slice(who.Devices, func(a, b int) bool { return who.Devices[a].DeviceID < who.Devices[b].DeviceID })
		dir[schemas.RecipientKey("acme", u)] = who
	}
	return dir, users
}

type timed struct {
	n  schemas.Accepted
	at time.Time
}

// crashWorkload is n notifications twenty seconds apart (83 hours of
// nights, digests and rate windows), then one urgent notification per
// partition far later, so every partition's stream time passes every timer.
func crashWorkload(rng *rand.Rand, users []string, n int, partitions int, base time.Time) []timed {
	var out []timed
	for k := range n {
		// Rated and digest notifications go to a few busy recipients, so
		// limits bite and digests gather several.
		u := users[rng.IntN(len(users))]
		var typ string
		switch x := rng.IntN(100); {
		case x < 40:
			typ, u = "rated", users[rng.IntN(12)]
		case x < 70:
			typ, u = "digest", users[rng.IntN(8)]
		case x < 95:
			typ = "news"
		default:
			typ = "alert"
		}
		key := fmt.Sprint(k)
		out = append(out, timed{schemas.Accepted{NotificationID: identity.DedupeID("acme", typ, u, key), RequestID: identity.NewRandomID(),
			Tenant: "acme", Type: typ, Recipient: u, Title: typ + " " + key, Body: "b", DedupeKey: key},
			base.Add(time.Duration(k) * 20 * time.Second)})
	}
	covered := map[int32]bool{}
	for _, u := range users {
		p := topics.PartitionOf(schemas.RecipientKey("acme", u), partitions)
		if covered[p] {
			continue
		}
		covered[p] = true
		out = append(out, timed{schemas.Accepted{NotificationID: identity.DedupeID("acme", "alert", u, "end"), RequestID: identity.NewRandomID(),
			Tenant: "acme", Type: "alert", Recipient: u, Title: "end", Body: "b"}, base.Add(time.Duration(n)*20*time.Second + 48*time.Hour)})
	}
	return out
}

// modelRun decides the workload with Tasks in process, one per partition,
// committing after every record: the outputs a crash-free stage commits.
// loseStateAt > 0 replaces partition 0's task by an empty one after that
// many of its records (a restart that failed to restore).
func modelRun(t *testing.T, work []timed, dir StaticDirectory, input string, partitions int, loseStateAt int) (map[string]string, map[string]int) {
	t.Helper()
	tasks := map[int32]*Task{}
	offsets := map[int32]int64{}
	decisions, commands := map[string]string{}, map[string]int{}
	for _, w := range work {
		p := topics.PartitionOf(schemas.RecipientKey(w.n.Tenant, w.n.Recipient), partitions)
		if tasks[p] == nil || p == 0 && int(offsets[p]) == loseStateAt {
			tasks[p] = NewTask(crashPolicy, testTopics, p, dir, nil)
		}
		rec := acceptedRecord(t, w.n, offsets[p], 0)
		rec.Topic, rec.Partition, rec.Timestamp = input, p, w.at
		offsets[p]++
		var out stage.Out
		if err := tasks[p].Process(rec, &out); err != nil {
			t.Fatal(err)
		}
		tasks[p].Commit()
		for _, r := range out.Records() {
			collectInto(t, r, decisions, commands)
		}
	}
	return decisions, commands
}

// collectInto files one output record: decisions by id (outcome and
// channel), commands by delivery id, channel and not-before time.
func collectInto(t *testing.T, r *kgo.Record, decisions map[string]string, commands map[string]int) {
	t.Helper()
	switch {
	case r.Topic == testTopics.Decisions || r.Topic == "decisions":
		var d schemas.Decision
		if err := schemas.Decode(r.Value, &d); err != nil {
			t.Fatal(err)
		}
		decisions[d.DecisionID] = d.Outcome + ":" + d.Channel
	case r.Value != nil && r.Topic != testTopics.Route:
		var c schemas.DeliveryCommand
		if err := schemas.Decode(r.Value, &c); err != nil {
			t.Fatal(err)
		}
		commands[c.DeliveryID+"/"+c.Channel+"/"+fmt.Sprint(c.NotBefore)]++
	}
}

func TestExactlyOnceThroughSIGKILLsAndRebalances(t *testing.T) {
	brokers := testenv.Kafka(t)
	bin := testenv.Herald(t)
	const partitions = 6
	cat := testenv.Catalog(t, brokers, partitions)
	group := "g-" + cat.Name("route")
	logDir := t.TempDir()
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 2))
	t.Logf("seed %d", seed)

	dir, users := crashWorld()
	// The whole workload, sentinels included, lies inside the topics' seven
	// days of retention (older records would be deleted under the test)
	// and before now (the broker refuses records from the future).
	base := time.Now().Add(-150 * time.Hour).Truncate(time.Hour)
	work := crashWorkload(rng, users, 15_000, partitions, base)

	wantDecisions, wantCommands := modelRun(t, work, dir, cat.Name(topics.Accepted), partitions, -1)
	t.Run("the workload notices a stage that loses its state once", func(t *testing.T) {
		lostD, lostC := modelRun(t, work, dir, cat.Name(topics.Accepted), partitions, 500)
		if fmt.Sprint(lostD) == fmt.Sprint(wantDecisions) && fmt.Sprint(lostC) == fmt.Sprint(wantCommands) {
			t.Fatal("losing partition 0's state changes no output: the comparison below could not catch it")
		}
	})
	var outcomes = map[string]int{}
	for _, o := range wantDecisions {
		outcomes[o]++
	}
	t.Logf("model: %d decisions %v, %d delivery commands", len(wantDecisions), outcomes, len(wantCommands))

	// Devices and preferences first.
	var setup []*kgo.Record
	for _, who := range dir {
		for _, d := range who.Devices {
			setup = append(setup, encoded(t, cat.Name(topics.Devices), schemas.DeviceKey(d.Tenant, d.Recipient, d.DeviceID), &d, base))
		}
		if who.Prefs != nil {
			setup = append(setup, encoded(t, cat.Name(topics.Preferences), schemas.RecipientKey("acme", who.Prefs.Recipient), who.Prefs, base))
		}
	}
	produce(t, brokers, cat, setup)

	inst := testenv.NewInstances(t, bin, logDir, func(id string) []string {
		return append([]string{"route", "--brokers", brokers[0], "--topic-prefix", cat.Options().Prefix,
			"--partitions", fmt.Sprint(partitions), "--replication", "1", "--instance-id", id, "--group", group,
			"--batch-interval", "50ms", "--transaction-timeout", "10s"}, crashArgs...)
	})
	inst.Start("i1")
	inst.Start("i2")

	produced := make(chan struct{})
	go func() {
		defer close(produced)
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(cat.Partitioner()))
		if err != nil {
			t.Error(err)
			return
		}
		defer cl.Close()
		for off := 0; off < len(work); off += 1500 {
			var recs []*kgo.Record
			for _, w := range work[off:min(off+1500, len(work))] {
				b, _ := schemas.Encode(&w.n)
				recs = append(recs, &kgo.Record{Topic: cat.Name(topics.Accepted), Key: []byte(schemas.RecipientKey(w.n.Tenant, w.n.Recipient)),
					Value: b, Timestamp: w.at})
			}
			if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
				t.Error(err)
				return
			}
			time.Sleep(500 * time.Millisecond)
		}
	}()

	// SIGKILL a random instance every 0.4–1.6 s and restart it under the
	// same id; a third instance joins after the fifth kill (a rebalance).
	kills := inst.KillRandomly(rng, 15, 5, "i3", produced)
	t.Logf("%d SIGKILLs, 3 instances", kills)

	// Wait until every decision is in, or nothing has come for two
	// minutes (the machine may be slow; a stuck stage is not).
	// Decisions are counted with the route stage's own reader, which
	// returns the shared broker's transient errors (a leader election)
	// rather than failing: the next poll retries.
	last, lastChange := -1, time.Now()
	for {
		time.Sleep(3 * time.Second)
		byPartition, err := ReadAll(context.Background(), brokers, cat.Name(topics.Decisions), nil)
		if err != nil {
			t.Logf("counting decisions: %v (retrying)", err)
			continue
		}
		n := 0
		for _, recs := range byPartition {
			n += len(recs)
		}
		if n != last {
			last, lastChange = n, time.Now()
		}
		if n >= len(wantDecisions) || time.Since(lastChange) > 2*time.Minute {
			break
		}
	}
	got := readRouteOutput(t, brokers, cat)
	gotDecisions, gotCommands := map[string]string{}, map[string]int{}
	for _, d := range got.decisions {
		if _, dup := gotDecisions[d.DecisionID]; dup {
			t.Errorf("decision %s committed twice", d.DecisionID)
		}
		gotDecisions[d.DecisionID] = d.Outcome + ":" + d.Channel
	}
	for _, c := range got.commands {
		gotCommands[c.DeliveryID+"/"+c.Channel+"/"+fmt.Sprint(c.NotBefore)]++
	}
	var diffs int
	for id, o := range wantDecisions {
		if gotDecisions[id] != o {
			if diffs++; diffs <= 10 {
				t.Errorf("decision %s: %q, want %q", id, gotDecisions[id], o)
			}
		}
	}
	for id, o := range gotDecisions {
		if _, ok := wantDecisions[id]; !ok {
			if diffs++; diffs <= 10 {
				t.Errorf("unexpected decision %s: %q", id, o)
			}
		}
	}
	for k, n := range wantCommands {
		if gotCommands[k] != n {
			if diffs++; diffs <= 20 {
				t.Errorf("delivery %s: %d commands, want %d", k, gotCommands[k], n)
			}
		}
	}
	if len(gotCommands) != len(wantCommands) {
		t.Errorf("%d distinct deliveries, want %d", len(gotCommands), len(wantCommands))
	}
	if diffs > 0 {
		missing := map[string]int{}
		for id := range wantDecisions {
			if _, ok := gotDecisions[id]; !ok {
				var topic string
				var p, off int
				if _, err := fmt.Sscanf(strings.ReplaceAll(id, "/", " "), "route %s %d %d", &topic, &p, &off); err == nil {
					missing[fmt.Sprint("partition ", p)]++
				} else {
					missing["timers"]++
				}
			}
		}
		t.Logf("missing decisions: %v", missing)
	}
	if diffs > 0 || t.Failed() {
		t.Fatalf("%d differences from the crash-free model (%d decisions, %d commands committed)", diffs, len(got.decisions), len(got.commands))
	}
}
