package deadletters_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/embedded"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks"
	"github.com/heraldhq/herald/sinks/deadletters"
	"github.com/heraldhq/herald/topics"
)

// A fast test of the redrive's records on kfake (the real broker's runs,
// with a sink delivering them, are in redrive_test.go): over one dead
// letter of each kind, a dry run writes nothing; a redrive writes, per
// redrivable dead letter, its command or input, its marker and its audit
// decision, in transactions of Batch; a second redrive writes nothing.
func TestARedriveOnKfakeWritesEachCommandOrInputWithItsMarkerAndAudit(t *testing.T) {
	c := testenv.Kfake(t)
	brokers := c.ListenAddrs()
	cat := testenv.Catalog(t, brokers, 2)
	opts := append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, embedded.ClientOpts()...)
	now := time.Now()

	produce := func(cl *kgo.Client, r *kgo.Record) *kgo.Record {
		t.Helper()
		got, err := cl.ProduceSync(context.Background(), r).First()
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	cl := testenv.Client(t, brokers, append(opts, kgo.RecordPartitioner(cat.Partitioner()))...)
	manual := testenv.Client(t, brokers, append(opts, kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	input := produce(manual, &kgo.Record{Topic: cat.Name(topics.Requests), Partition: 1, Key: []byte("n-7"), Value: []byte(`{"schema":"herald.request/v1"}`)})
	cmd := func(id string, expires int64) []byte {
		b, err := schemas.Encode(&schemas.DeliveryCommand{DeliveryID: id, NotificationID: "n-" + id, Tenant: "acme", Type: "t", Recipient: "u1",
			DeviceID: "dev", Channel: "fcm", Token: "tok", CollapseID: "n", Title: "x", Body: "b", ExpiresAt: expires})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	sinkHeaders := []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(schemas.DeliveryCommandV1)},
		{Key: "herald-reason", Value: []byte("permanent: SENDER_ID_MISMATCH")}, {Key: "herald-attempts", Value: []byte("3")}, {Key: "herald-source", Value: []byte("sink.fcm")}}
	stageLetter := func(d stage.DeadLetter) []byte { b, _ := json.Marshal(d); return b }
	stageHeaders := []kgo.RecordHeader{{Key: stage.HeaderDeadLetter, Value: []byte("dedupe")}}
	dl := cat.Name(topics.DeadLetters)
	for _, r := range []*kgo.Record{
		{Topic: dl, Key: []byte("d-live"), Value: cmd("d-live", now.Add(time.Hour).UnixMilli()), Headers: sinkHeaders},
		{Topic: dl, Key: []byte("d-expired"), Value: cmd("d-expired", now.Add(-time.Hour).UnixMilli()), Headers: sinkHeaders},
		{Topic: dl, Key: []byte("n-7"), Value: stageLetter(stage.DeadLetter{Stage: "dedupe", Reason: "MESSAGE_TOO_LARGE", Topic: input.Topic, Partition: 1, Offset: input.Offset}), Headers: stageHeaders},
		{Topic: dl, Key: []byte("n-8"), Value: stageLetter(stage.DeadLetter{Stage: "dedupe", Reason: "MESSAGE_TOO_LARGE", Topic: input.Topic, Partition: 1, Offset: input.Offset + 5}), Headers: stageHeaders},
		{Topic: dl, Key: []byte("r"), Value: stageLetter(stage.DeadLetter{Stage: "route", Reason: "MESSAGE_TOO_LARGE", Topic: cat.Name(topics.Deliveries("fcm")), Partition: -1, Offset: -1, Timer: true}),
			Headers: []kgo.RecordHeader{{Key: stage.HeaderDeadLetter, Value: []byte("route")}}},
		{Topic: dl, Key: []byte("d-bad"), Value: []byte("{"), Headers: []kgo.RecordHeader{{Key: "herald-reason", Value: []byte("unreadable delivery command")},
			{Key: "herald-source", Value: []byte(cat.Name(topics.Deliveries("fcm")) + "/0@3")}}},
	} {
		produce(cl, r)
	}

	t.Run("a redrive without who or why is refused", func(t *testing.T) {
		for _, rd := range []deadletters.Redrive{
			{Catalog: cat, Reason: "x"},
			{Catalog: cat, By: "alice"},
			{Catalog: cat, By: "alice", Reason: "x", Batch: -1},
			{Catalog: cat, By: "alice", Reason: "x", Filter: deadletters.Filter{Class: "fatal"}},
			{By: "alice", Reason: "x"},
		} {
			if _, err := rd.Run(context.Background()); err == nil {
				t.Errorf("%+v was run", rd)
			}
		}
	})

	redrive := func(dry bool, progress *[]int) *deadletters.Report {
		t.Helper()
		rep, err := deadletters.Redrive{ClientOpts: opts, Catalog: cat, By: "alice", Reason: "fixed", DryRun: dry, Batch: 1,
			Progress: func(done, _ int) { *progress = append(*progress, done) }}.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	kinds := func(ls []*deadletters.Letter) (out []string) {
		for _, l := range ls {
			out = append(out, l.Kind+":"+l.Stage)
		}
		return out
	}
	whys := func(ss []deadletters.Skip) (out []string) {
		for _, s := range ss {
			out = append(out, s.Letter.ID+" "+strings.Join(strings.Fields(s.Why)[:2], " "))
		}
		return out
	}
	t.Run("a dry run reports and writes nothing", func(t *testing.T) {
		var progress []int
		rep := redrive(true, &progress)
		if got := kinds(rep.Redriven); !slices.Equal(got, []string{"delivery:sink.fcm", "stage:dedupe"}) || len(rep.Skipped) != 4 || len(progress) != 0 {
			t.Fatalf("redriven %v, skipped %v, progress %v", got, whys(rep.Skipped), progress)
		}
		if n := len(testenv.ReadCommitted(t, brokers, cat.Name(topics.Decisions), opts...)); n != 0 {
			t.Errorf("a dry run wrote %d decisions", n)
		}
	})

	var rep *deadletters.Report
	t.Run("a redrive writes each with its marker and audit decision", func(t *testing.T) {
		var progress []int
		rep = redrive(false, &progress)
		if got := kinds(rep.Redriven); !slices.Equal(got, []string{"delivery:sink.fcm", "stage:dedupe"}) || !slices.Equal(progress, []int{1, 2}) {
			t.Fatalf("redriven %v, progress %v", got, progress)
		}
		var why []string
		for _, w := range whys(rep.Skipped) {
			_, rest, _ := strings.Cut(w, " ")
			why = append(why, rest)
		}
		slices.Sort(why)
		if want := []string{"a timer's", "an unreadable", "its command", "its input"}; !slices.Equal(why, want) {
			t.Errorf("skipped because %v, want %v", why, want)
		}
		cmds := testenv.ReadCommitted(t, brokers, cat.Name(topics.Deliveries("fcm")), opts...)
		if len(cmds) != 1 || string(cmds[0].Key) != "d-live" {
			t.Fatalf("%d commands on the deliveries topic, want d-live's", len(cmds))
		}
		if n, ok := sinks.RedriveOf(cmds[0]); !ok || n != 3 || hv(t, cmds[0], deadletters.HeaderRedriveID) != rep.ID ||
			hv(t, cmds[0], schemas.HeaderSchema) != schemas.DeliveryCommandV1 {
			t.Errorf("the command's headers %v", cmds[0].Headers)
		}
		var again []*kgo.Record
		for _, r := range testenv.ReadCommitted(t, brokers, input.Topic, opts...) {
			if r.Offset != input.Offset {
				again = append(again, r)
			}
		}
		if len(again) != 1 || again[0].Partition != 1 || string(again[0].Key) != "n-7" || hv(t, again[0], deadletters.HeaderRedriveInput) != rep.Redriven[1].ID {
			t.Fatalf("the input written again: %v", again)
		}
		var audit []string
		for _, r := range testenv.ReadCommitted(t, brokers, cat.Name(topics.Decisions), opts...) {
			var d schemas.Decision
			if err := schemas.Decode(r.Value, &d); err != nil {
				t.Fatal(err)
			}
			audit = append(audit, d.Stage+"/"+d.Outcome+"/"+d.Producer+"/"+d.Channel+"/"+d.NotificationID)
			if !strings.Contains(d.Detail, "redriven by alice: fixed") || d.RequestID != rep.ID || d.DecisionID != fmt.Sprintf("redrive/%s/%d-%d", rep.ID, d.SourcePartition, d.SourceOffset) || d.SourceTopic != dl {
				t.Errorf("decision %+v", d)
			}
		}
		slices.Sort(audit)
		if want := []string{"deadletters/redriven/alice//", "deadletters/redriven/alice/fcm/n-d-live"}; !slices.Equal(audit, want) {
			t.Errorf("audit %v, want %v", audit, want)
		}
	})

	t.Run("a second redrive writes nothing and says they were redriven", func(t *testing.T) {
		var progress []int
		again := redrive(false, &progress)
		if len(again.Redriven) != 0 || len(again.Skipped) != 6 || len(progress) != 0 {
			t.Fatalf("redriven %d, skipped %v", len(again.Redriven), whys(again.Skipped))
		}
		set, err := deadletters.Read(context.Background(), dl, deadletters.Filter{Redriven: "yes"}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if got := set.Select(deadletters.Filter{Redriven: "yes"}); len(got) != 2 || got[0].Redrives[0].Redrive != rep.ID || got[1].Redrives[0].By != "alice" {
			t.Errorf("redriven letters %+v", got)
		}
	})
}

func hv(t *testing.T, r *kgo.Record, key string) string {
	t.Helper()
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}
