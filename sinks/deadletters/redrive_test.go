package deadletters_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/analytics/audit"
	"github.com/heraldhq/herald/analytics/auditwriter"
	"github.com/heraldhq/herald/analytics/migrations"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/internal/backoff"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks"
	"github.com/heraldhq/herald/sinks/apns"
	"github.com/heraldhq/herald/sinks/apns/emulator"
	"github.com/heraldhq/herald/sinks/deadletters"
	"github.com/heraldhq/herald/sinks/sinktest"
	"github.com/heraldhq/herald/topics"
)

// commands are n delivery commands to n devices of one recipient.
func commands(n int) []*schemas.DeliveryCommand {
	out := make([]*schemas.DeliveryCommand, n)
	now := time.Now()
	for i := range out {
		nid := identity.DedupeID("acme", "invoice.paid", "u1", fmt.Sprintf("n%d", i))
		dev := fmt.Sprintf("dev%d", i)
		out[i] = &schemas.DeliveryCommand{
			DeliveryID: identity.DeliveryID(nid, dev), NotificationID: nid, Tenant: "acme", Type: "invoice.paid", Recipient: "u1",
			DeviceID: dev, Channel: "apns", Token: "tok-" + dev, CollapseID: nid, APNsID: identity.APNsID(nid),
			Title: "paid", Body: "b", CreatedAt: now.UnixMilli(), ExpiresAt: now.Add(time.Hour).UnixMilli(),
		}
	}
	return out
}

func ids(cmds []*schemas.DeliveryCommand) []string {
	var out []string
	for _, c := range cmds {
		out = append(out, c.DeliveryID)
	}
	return out
}

// failingSink starts an APNs emulator that refuses the first n pushes for
// good (403 ExpiredProviderToken: a bad provider key, fixed after that), and
// an APNs sink sending to it.
func failingSink(t *testing.T, brokers []string, cat *topics.Catalog, n int) *emulator.Emulator {
	t.Helper()
	em, err := emulator.Start(emulator.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { em.Close() })
	em.AddRule(emulator.Rule{Status: 403, Reason: "ExpiredProviderToken", Times: n})
	prov, err := apns.New(apns.Config{Host: em.URL(), RootCAs: em.RootCAs(), Topic: "com.example.app"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prov.CloseIdleConnections)
	sinktest.Start(t, sinks.Options{Instance: stage.Instance{Brokers: brokers}, Channel: "apns", Provider: prov, Catalog: cat,
		Policy: sinks.Policy{MaxAttempts: 3, Backoff: backoff.Policy{Min: 20 * time.Millisecond, Max: 100 * time.Millisecond}}, CallTimeout: 5 * time.Second})
	return em
}

// deadLetters produces the commands and waits until the sink failed each
// once: n dead letters.
func deadLetters(t *testing.T, brokers []string, cat *topics.Catalog, cmds []*schemas.DeliveryCommand) {
	t.Helper()
	sinktest.RegisterDevices(t, brokers, cat, cmds...)
	sinktest.Produce(t, brokers, cat, cmds...)
	a := sinktest.AwaitOutcomes(t, brokers, cat, ids(cmds)...)
	for _, c := range cmds {
		if o := a.Outcomes[c.DeliveryID]; len(o) != 1 || o[0].Status != schemas.OutcomeFailed || a.Dead[c.DeliveryID] != 1 {
			t.Fatalf("%s: outcomes %+v, %d dead letters; want one failed outcome and one dead letter", c.DeliveryID, o, a.Dead[c.DeliveryID])
		}
	}
}

// awaitOutcomes waits (up to two minutes) until every delivery has n
// outcomes.
func awaitOutcomes(t *testing.T, brokers []string, cat *topics.Catalog, ids []string, n int) sinktest.Audit {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		a := sinktest.Read(t, brokers, cat)
		missing := 0
		for _, id := range ids {
			if len(a.Outcomes[id]) < n {
				missing++
			}
		}
		if missing == 0 {
			return sinktest.Read(t, brokers, cat)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d deliveries have fewer than %d outcomes", missing, len(ids), n)
		}
	}
}

func read(t *testing.T, brokers []string, cat *topics.Catalog) *deadletters.Set {
	t.Helper()
	s, err := deadletters.Read(context.Background(), cat.Name(topics.DeadLetters), deadletters.Filter{}, kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// accepted counts, per delivery, the pushes the emulator accepted: every
// push it read but the first n (refused by the rule).
func accepted(a sinktest.Audit, cmds []*schemas.DeliveryCommand) map[string]int {
	out := map[string]int{}
	for _, c := range cmds {
		for _, at := range a.Attempts[c.DeliveryID] {
			if at.Result == schemas.AttemptSent {
				out[c.DeliveryID]++
			}
		}
	}
	return out
}

// redrivenDecisions are the audit decisions of redrives, by delivery's
// notification id.
func redrivenDecisions(t *testing.T, brokers []string, cat *topics.Catalog) map[string][]schemas.Decision {
	t.Helper()
	out := map[string][]schemas.Decision{}
	for _, r := range testenv.ReadCommitted(t, brokers, cat.Name(topics.Decisions)) {
		var d schemas.Decision
		if err := schemas.Decode(r.Value, &d); err != nil {
			t.Fatal(err)
		}
		if d.Outcome == schemas.DecisionRedriven {
			out[d.NotificationID] = append(out[d.NotificationID], d)
		}
	}
	return out
}

func TestARedriveDeliversEachDeadLetterOnce(t *testing.T) {
	brokers := testenv.Kafka(t)
	cat := testenv.Catalog(t, brokers, 2)
	const n = 20
	em := failingSink(t, brokers, cat, n)
	cmds := commands(n)
	deadLetters(t, brokers, cat, cmds)
	opts := []kgo.Opt{kgo.SeedBrokers(brokers...)}

	t.Run("the list has each failed delivery once, with its class and reason", func(t *testing.T) {
		letters := read(t, brokers, cat).Select(deadletters.Filter{Channel: "apns", Tenant: "acme", Type: "invoice.paid"})
		if len(letters) != n {
			t.Fatalf("%d dead letters, want %d", len(letters), n)
		}
		for _, l := range letters {
			if l.Kind != deadletters.KindDelivery || l.Class != deadletters.ClassPermanent || l.Attempts != 1 ||
				!strings.Contains(l.Reason, "ExpiredProviderToken") || l.Stage != "sink.apns" || l.Redriven() {
				t.Errorf("dead letter %+v", l)
			}
		}
		counts := deadletters.Counts(letters)
		if len(counts) != 1 || counts[0].Letters != n || counts[0].Redriven != 0 {
			t.Errorf("counts %+v, want one reason with %d letters", counts, n)
		}
		if got := read(t, brokers, cat).Select(deadletters.Filter{Class: deadletters.ClassExhausted}); len(got) != 0 {
			t.Errorf("class exhausted selects %d letters", len(got))
		}
	})

	t.Run("a dry run reports every dead letter and writes nothing", func(t *testing.T) {
		rep, err := deadletters.Redrive{ClientOpts: opts, Catalog: cat, Filter: deadletters.Filter{Channel: "apns"}, By: "alice",
			Reason: "checking", DryRun: true}.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Redriven) != n || len(rep.Skipped) != 0 {
			t.Fatalf("dry run: %d to redrive, %d skipped; want %d, 0", len(rep.Redriven), len(rep.Skipped), n)
		}
		if got := read(t, brokers, cat).Select(deadletters.Filter{Redriven: "yes"}); len(got) != 0 {
			t.Errorf("after a dry run %d dead letters are marked redriven", len(got))
		}
	})

	t.Run("a redrive delivers each once, audited", func(t *testing.T) {
		rep, err := deadletters.Redrive{ClientOpts: opts, Catalog: cat, Filter: deadletters.Filter{Class: deadletters.ClassPermanent},
			By: "alice", Reason: "APNs key renewed"}.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Redriven) != n || len(rep.Skipped) != 0 {
			t.Fatalf("redrove %d, skipped %d; want %d, 0", len(rep.Redriven), len(rep.Skipped), n)
		}
		a := awaitOutcomes(t, brokers, cat, ids(cmds), 2)
		sent := accepted(a, cmds)
		audit := redrivenDecisions(t, brokers, cat)
		for _, c := range cmds {
			var results []string
			for i, at := range a.Attempts[c.DeliveryID] {
				results = append(results, at.Result)
				if at.Attempt != i+1 || at.APNsID != c.APNsID {
					t.Errorf("%s: attempt %d numbered %d with apns-id %s", c.DeliveryID, i+1, at.Attempt, at.APNsID)
				}
			}
			if got := strings.Join(results, ","); got != "permanent,sent" || sent[c.DeliveryID] != 1 {
				t.Errorf("%s: attempts %q, want permanent,sent", c.DeliveryID, got)
			}
			if a.Dead[c.DeliveryID] != 1 {
				t.Errorf("%s: %d dead letters after the redrive (its marker is not one), want 1", c.DeliveryID, a.Dead[c.DeliveryID])
			}
			if o := a.Outcomes[c.DeliveryID]; o[1].Status != schemas.OutcomeDelivered {
				t.Errorf("%s: outcome after the redrive %s", c.DeliveryID, o[1].Status)
			}
			if d := audit[c.NotificationID]; len(d) != 1 || d[0].Producer != "alice" || !strings.Contains(d[0].Detail, "APNs key renewed") || d[0].Stage != deadletters.DecisionStage {
				t.Errorf("%s: redrive audit %+v", c.DeliveryID, d)
			}
		}
		if pushes := em.Total(); pushes != 2*n {
			t.Errorf("the emulator read %d pushes, want %d (each refused once, then accepted once)", pushes, 2*n)
		}
		for _, l := range read(t, brokers, cat).Letters {
			if len(l.Redrives) != 1 || l.Redrives[0].By != "alice" || l.Redrives[0].Redrive != rep.ID {
				t.Errorf("%s: redrives %+v", l.ID, l.Redrives)
			}
		}
	})

	t.Run("the audit writer stores each redrive in ClickHouse, on the notification's timeline", func(t *testing.T) {
		conn, database := auditWriter(t, brokers, cat)
		var rows uint64
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(300 * time.Millisecond) {
			if err := conn.QueryRow(context.Background(), "SELECT count() FROM `"+database+"`.decisions WHERE outcome = 'redriven' AND stage = 'deadletters' AND producer = 'alice'").Scan(&rows); err != nil {
				t.Fatal(err)
			}
			if rows >= n || time.Now().After(deadline) {
				break
			}
		}
		if rows != n {
			t.Fatalf("ClickHouse holds %d redrive decisions, want %d", rows, n)
		}
		tl, err := audit.Load(context.Background(), conn, database, audit.Selector{NotificationID: cmds[0].NotificationID})
		if err != nil {
			t.Fatal(err)
		}
		var buf strings.Builder
		if err := tl.Print(&buf); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(buf.String(), "deadletters stage: redriven") || !strings.Contains(buf.String(), "by alice: APNs key renewed") {
			t.Errorf("the timeline shows no redrive:\n%s", buf.String())
		}
	})

	t.Run("redriving again redrives nothing", func(t *testing.T) {
		rep, err := deadletters.Redrive{ClientOpts: opts, Catalog: cat, By: "bob", Reason: "again"}.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Redriven) != 0 || len(rep.Skipped) != n {
			t.Fatalf("redrove %d, skipped %d; want 0, %d", len(rep.Redriven), len(rep.Skipped), n)
		}
		for _, s := range rep.Skipped {
			if !strings.HasPrefix(s.Why, "redriven already, by alice") {
				t.Errorf("skipped %s: %s", s.Letter.ID, s.Why)
			}
		}
	})

	// The sink is the last line of defence: copies of the redrive's
	// commands (two operators racing, or a redrive whose markers were lost)
	// find the deliveries delivered and are not sent.
	t.Run("a copy of a redrive is not sent again", func(t *testing.T) {
		cl := testenv.Client(t, brokers, kgo.RecordPartitioner(cat.Partitioner()))
		for _, c := range cmds {
			b, err := schemas.Encode(c)
			if err != nil {
				t.Fatal(err)
			}
			rec := &kgo.Record{Topic: cat.Name(topics.Deliveries("apns")), Key: []byte(c.DeliveryID), Value: b,
				Headers: []kgo.RecordHeader{{Key: sinks.HeaderRedrive, Value: []byte("1")}}}
			if err := cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
			refused := 0
			for _, r := range testenv.ReadCommitted(t, brokers, cat.Name(topics.Decisions)) {
				var d schemas.Decision
				if schemas.Decode(r.Value, &d) == nil && d.Stage == "sink" && d.Outcome == schemas.DecisionDuplicate &&
					strings.HasPrefix(d.Detail, "redrive of the dead letter") {
					refused++
				}
			}
			if refused == n {
				break
			}
			if refused > n || time.Now().After(deadline) {
				t.Fatalf("%d copies refused as duplicates, want %d", refused, n)
			}
		}
		a := sinktest.Read(t, brokers, cat)
		for _, c := range cmds {
			if len(a.Attempts[c.DeliveryID]) != 2 || len(a.Outcomes[c.DeliveryID]) != 2 {
				t.Errorf("%s: %d attempts, %d outcomes after the copies; want 2, 2", c.DeliveryID, len(a.Attempts[c.DeliveryID]), len(a.Outcomes[c.DeliveryID]))
			}
		}
		if pushes := em.Total(); pushes != 2*n {
			t.Errorf("the emulator read %d pushes, want %d", pushes, 2*n)
		}
	})
}

// TestASIGKILLedRedriveDeliversEachDeadLetterOnce fails 1,000 deliveries,
// then runs `herald deadletters redrive` (100 dead letters a transaction)
// and SIGKILLs it after its first commit, while its next transaction is
// open when the broker shows one (logged), twice, then runs
// it to the end, and once more: each delivery is sent exactly once more,
// each dead letter has one marker and one audit decision, and the last
// run redrives nothing.
func TestASIGKILLedRedriveDeliversEachDeadLetterOnce(t *testing.T) {
	brokers := testenv.Kafka(t)
	const partitions, n = 4, 1000
	cat := testenv.Catalog(t, brokers, partitions)
	em := failingSink(t, brokers, cat, n)
	cmds := commands(n)
	deadLetters(t, brokers, cat, cmds)
	bin := testenv.Herald(t)

	// redrive runs the command; with kill, it SIGKILLs it at its first
	// commit and returns how many it had reported committed.
	redrive := func(kill bool) (string, int) {
		t.Helper()
		cmd := exec.Command(bin, "deadletters", "redrive", "--brokers", brokers[0], "--topic-prefix", cat.Options().Prefix,
			"--partitions", strconv.Itoa(partitions), "--replication", "1", "--channel", "apns",
			"--reason", "provider key renewed", "--by", "crash-test", "--batch", "100")
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var lines []string
		committed := 0
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			lines = append(lines, line)
			if rest, ok := strings.CutPrefix(line, "committed: "); ok {
				committed, _ = strconv.Atoi(strings.Fields(rest)[0])
				if kill {
					// Kill it with its next transaction open if we can see
					// one (its records past the last stable offset), else
					// after a moment: either way mid-redrive.
					deliveries := cat.Name(topics.Deliveries("apns"))
					for end := time.Now().Add(2 * time.Second); openRecords(t, brokers, deliveries) == 0 && time.Now().Before(end); {
					}
					cmd.Process.Signal(syscall.SIGKILL)
					cmd.Wait()
					t.Logf("at the SIGKILL, %d records of an open transaction were on the deliveries topic", openRecords(t, brokers, cat.Name(topics.Deliveries("apns"))))
					break
				}
			}
		}
		for sc.Scan() { // drain the pipe so Wait returns
		}
		if kill {
			return strings.Join(lines, "\n"), committed
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("redrive: %v\n%s\n%s", err, strings.Join(lines, "\n"), stderr.String())
		}
		return strings.Join(lines, "\n"), committed
	}
	for i := range 2 {
		_, committed := redrive(true)
		t.Logf("run %d SIGKILLed after reporting %d of the dead letters committed", i+1, committed)
	}
	out, _ := redrive(false)
	t.Logf("the run to the end: %s", firstLine(out))

	a := awaitOutcomes(t, brokers, cat, ids(cmds), 2)
	sent := accepted(a, cmds)
	audit := redrivenDecisions(t, brokers, cat)
	for _, c := range cmds {
		if sent[c.DeliveryID] != 1 || len(a.Outcomes[c.DeliveryID]) != 2 {
			t.Errorf("%s: sent %d times, %d outcomes; want once, 2", c.DeliveryID, sent[c.DeliveryID], len(a.Outcomes[c.DeliveryID]))
		}
		if len(audit[c.NotificationID]) != 1 {
			t.Errorf("%s: %d redrive decisions, want 1", c.DeliveryID, len(audit[c.NotificationID]))
		}
	}
	for _, l := range read(t, brokers, cat).Letters {
		if len(l.Redrives) != 1 {
			t.Errorf("%s: %d redrive markers, want 1", l.ID, len(l.Redrives))
		}
	}
	if pushes := em.Total(); pushes != 2*n {
		t.Errorf("the emulator read %d pushes, want %d", pushes, 2*n)
	}
	if out, _ := redrive(false); !strings.Contains(out, ": 0 redriven, 1000 skipped") {
		t.Errorf("a redrive after all were redriven: %s", firstLine(out))
	}
}

// openRecords is how many records of a topic are past its last stable
// offsets: written by a transaction still open.
func openRecords(t *testing.T, brokers []string, topic string) int64 {
	t.Helper()
	adm := kadm.NewClient(testenv.Client(t, brokers))
	ends, err := adm.ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	stable, err := adm.ListCommittedOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) {
		if s, ok := stable.Lookup(o.Topic, o.Partition); ok {
			n += o.Offset - s.Offset
		}
	})
	return n
}

func firstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "redrive ") {
			return l
		}
	}
	return s
}

// TestAStageDeadLetterIsRedrivenByWritingItsInputAgainOnce: a stage's dead
// letter names its input's position; a redrive writes that input again, to
// the same partition (whatever its key hashes to), once; an input no
// longer on the topic and a timer's output are skipped, saying why.
func TestAStageDeadLetterIsRedrivenByWritingItsInputAgainOnce(t *testing.T) {
	brokers := testenv.Kafka(t)
	const partitions = 4
	cat := testenv.Catalog(t, brokers, partitions)
	requests := cat.Name(topics.Requests)
	key := "k0"
	for i := 0; topics.PartitionOf(key, partitions) == 2; i++ {
		key = "k" + strconv.Itoa(i)
	}
	manual := testenv.Client(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	in := &kgo.Record{Topic: requests, Partition: 2, Key: []byte(key), Value: []byte(`{"schema":"herald.request/v1"}`),
		Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte("herald.request/v1")}}}
	if err := manual.ProduceSync(context.Background(), in).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cl := testenv.Client(t, brokers, kgo.RecordPartitioner(cat.Partitioner()))
	for _, d := range []stage.DeadLetter{
		{Stage: "dedupe", Reason: "MESSAGE_TOO_LARGE", Topic: requests, Partition: 2, Offset: in.Offset},
		{Stage: "dedupe", Reason: "MESSAGE_TOO_LARGE", Topic: requests, Partition: 2, Offset: in.Offset + 100},
		{Stage: "route", Reason: "MESSAGE_TOO_LARGE", Topic: cat.Name(topics.Deliveries("apns")), Partition: -1, Offset: -1, Timer: true},
	} {
		b, _ := json.Marshal(d)
		rec := &kgo.Record{Topic: cat.Name(topics.DeadLetters), Key: []byte(key), Value: b,
			Headers: []kgo.RecordHeader{{Key: stage.HeaderDeadLetter, Value: []byte(d.Stage)}}}
		if err := cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	run := func() *deadletters.Report {
		t.Helper()
		rep, err := deadletters.Redrive{ClientOpts: []kgo.Opt{kgo.SeedBrokers(brokers...)}, Catalog: cat, Filter: deadletters.Filter{Class: deadletters.ClassUnwritable},
			By: "alice", Reason: "max.message.bytes raised"}.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	rep := run()
	if len(rep.Redriven) != 1 || rep.Redriven[0].Stage != "dedupe" || rep.Redriven[0].Source != fmt.Sprintf("%s/2@%d", requests, in.Offset) {
		t.Fatalf("redriven %+v", rep.Redriven)
	}
	whys := map[string]bool{}
	for _, s := range rep.Skipped {
		whys[strings.SplitN(s.Why, " ", 3)[1]] = true
	}
	if len(rep.Skipped) != 2 || !whys["input"] || !whys["timer's"] {
		t.Errorf("skipped %+v: want the input no longer on the topic and the timer's output", rep.Skipped)
	}
	if again := run(); len(again.Redriven) != 0 || len(again.Skipped) != 3 {
		t.Errorf("the redrive again: %d redriven, %d skipped; want 0, 3", len(again.Redriven), len(again.Skipped))
	}
	var written []*kgo.Record
	for _, r := range testenv.ReadCommitted(t, brokers, requests) {
		if string(r.Key) != key {
			continue
		}
		written = append(written, r)
		if r.Partition != 2 || string(r.Value) != string(in.Value) {
			t.Errorf("%s/%d@%d: %q", r.Topic, r.Partition, r.Offset, r.Value)
		}
	}
	if len(written) != 2 {
		t.Fatalf("the input is on the topic %d times, want twice (the original and the redrive)", len(written))
	}
	if v, ok := headerValue(written[1], deadletters.HeaderRedriveInput); !ok || v != rep.Redriven[0].ID {
		t.Errorf("the written input's %s header is %q", deadletters.HeaderRedriveInput, v)
	}
}

func headerValue(r *kgo.Record, key string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// auditWriter migrates a ClickHouse database of the test's own and runs
// the audit writer into it until the test ends.
func auditWriter(t *testing.T, brokers []string, cat *topics.Catalog) (driver.Conn, string) {
	t.Helper()
	addr, database := testenv.ClickHouseDB(t)
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	if _, err := migrations.Apply(ctx, conn, migrations.Options{Database: database, AppliedBy: t.Name()}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := auditwriter.Run(ctx, auditwriter.Options{Brokers: brokers, Catalog: cat, ClickHouse: conn, Database: database,
			FlushInterval: 200 * time.Millisecond}); err != nil && ctx.Err() == nil {
			t.Errorf("audit writer: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return conn, database
}
