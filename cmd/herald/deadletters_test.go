package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/topics"
)

// TestDeadLettersListShowAndRedriveOnTheRealBroker runs the commands an
// operator runs over a delivery's dead letter and a stage's: list with
// counts, show, a dry run, the redrive, and the redrive again.
func TestDeadLettersListShowAndRedriveOnTheRealBroker(t *testing.T) {
	brokers := testenv.Kafka(t)
	cat := testenv.Catalog(t, brokers, 1)
	cl := testenv.Client(t, brokers, kgo.RecordPartitioner(cat.Partitioner()))
	cmd := &schemas.DeliveryCommand{DeliveryID: "d1", NotificationID: "52f364d9288c640b306b566e509104bd", Tenant: "acme", Type: "invoice.paid",
		Recipient: "u_8831", DeviceID: "dev", Channel: "apns", Token: "a-secret-device-token", CollapseID: "c", Title: "x", Body: "b"}
	b, err := schemas.Encode(cmd)
	if err != nil {
		t.Fatal(err)
	}
	sd, _ := json.Marshal(stage.DeadLetter{Stage: "route", Reason: "MESSAGE_TOO_LARGE", Topic: cat.Name(topics.Accepted), Partition: 0, Offset: 9})
	for _, r := range []*kgo.Record{
		{Topic: cat.Name(topics.DeadLetters), Key: []byte("d1"), Value: b, Headers: []kgo.RecordHeader{
			{Key: "herald-reason", Value: []byte("permanent: BadTopic")}, {Key: "herald-attempts", Value: []byte("1")}, {Key: "herald-source", Value: []byte("sink.apns")}}},
		{Topic: cat.Name(topics.DeadLetters), Key: []byte("acme/u_8831"), Value: sd, Headers: []kgo.RecordHeader{{Key: stage.HeaderDeadLetter, Value: []byte("route")}}},
	} {
		if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	herald := func(args ...string) (int, string) {
		var out, errOut bytes.Buffer
		args = append(args, "--brokers", brokers[0], "--topic-prefix", cat.Options().Prefix, "--partitions", "1", "--replication", "1")
		code := run(context.Background(), args, &out, &errOut)
		return code, out.String() + errOut.String()
	}
	steps := []struct {
		name     string
		args     []string
		wantCode int
		want     []string
		not      string
	}{
		{"list shows both dead letters and counts by reason", []string{"deadletters", "list"}, 0,
			[]string{"0-0  ", "sink.apns  permanent  acme/invoice.paid to u_8831, delivery d1, failed at attempt 1: permanent: BadTopic",
				"0-1  ", "route  unwritable  MESSAGE_TOO_LARGE (input " + cat.Name(topics.Accepted) + "/0@9)",
				"2 dead letters; by reason:", "1  sink.apns  permanent  permanent: BadTopic"}, "secret"},
		{"list filters by class", []string{"deadletters", "list", "--class", "unwritable"}, 0, []string{"1 dead letter; by reason"}, "BadTopic"},
		{"show prints the error and the input with the token masked", []string{"deadletters", "show", "0-0", "--clickhouse-addr", ""}, 0,
			[]string{"error: permanent: BadTopic (class permanent)", `"token": "…oken"`, "redrives: none"}, "a-secret-device-token"},
		{"show refuses what is not an id", []string{"deadletters", "show", "d1"}, 2, []string{`unexpected argument "d1"`}, ""},
		{"show refuses an --id that is not one", []string{"deadletters", "show", "--id", "d1"}, 2, []string{`--id "d1" is not a dead letter id`}, ""},
		{"redrive needs a reason", []string{"deadletters", "redrive", "--by", "alice"}, 2, []string{"--reason", "is required"}, ""},
		{"a dry run writes nothing", []string{"deadletters", "redrive", "--reason", "topic fixed", "--by", "alice", "--dry-run"}, 0,
			[]string{"1 would be redriven (dry run: nothing written), 1 skipped", "skipped 0-1: its input " + cat.Name(topics.Accepted) + "/0@9 is no longer on the topic"}, ""},
		{"the redrive", []string{"deadletters", "redrive", "--reason", "topic fixed", "--by", "alice"}, 0,
			[]string{"committed: 1 of 1 redriven", "by alice: 1 redriven, 1 skipped", "0-0  delivery d1 to sink.apns, failed at attempt 1"}, ""},
		{"list shows the redrive", []string{"deadletters", "list", "--redriven", "yes"}, 0, []string{"redriven by alice at", ": topic fixed", "(1 redriven)"}, "route"},
		{"the redrive again redrives nothing", []string{"deadletters", "redrive", "--reason", "again", "--by", "bob"}, 0,
			[]string{"0 redriven, 2 skipped", "skipped 0-0: redriven already, by alice"}, ""},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			code, out := herald(s.args...)
			if code != s.wantCode {
				t.Fatalf("exit %d, want %d:\n%s", code, s.wantCode, out)
			}
			for _, w := range s.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if s.not != "" && strings.Contains(out, s.not) {
				t.Errorf("output shows %q:\n%s", s.not, out)
			}
		})
	}
	if got := testenv.ReadCommitted(t, brokers, cat.Name(topics.Deliveries("apns"))); len(got) != 1 {
		t.Errorf("%d commands redriven to the deliveries topic, want 1", len(got))
	}
}
