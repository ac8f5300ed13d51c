package deadletters

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/schemas"
)

// The records each writer puts on herald.deadletters, at offsets 0.. of
// partition 0, and a redrive marker of the first.
func topicRecords(t *testing.T, now time.Time) []*kgo.Record {
	t.Helper()
	cmd := func(id string, expires int64) []byte {
		b, err := schemas.Encode(&schemas.DeliveryCommand{DeliveryID: id, NotificationID: "n-" + id, Tenant: "acme", Type: "t",
			Recipient: "u1", DeviceID: "dev", Channel: "fcm", Token: "a-long-secret-token", CollapseID: "n", Title: "x", Body: "b", ExpiresAt: expires})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	sinkHeaders := func(reason, attempts string) []kgo.RecordHeader {
		return []kgo.RecordHeader{{Key: "herald-reason", Value: []byte(reason)}, {Key: "herald-attempts", Value: []byte(attempts)},
			{Key: "herald-source", Value: []byte("sink.fcm")}}
	}
	sd, _ := json.Marshal(stage.DeadLetter{Stage: "dedupe", Reason: "MESSAGE_TOO_LARGE", Topic: "herald.requests", Partition: 3, Offset: 41})
	timer, _ := json.Marshal(stage.DeadLetter{Stage: "route", Reason: "MESSAGE_TOO_LARGE", Topic: "herald.deliveries.apns", Partition: -1, Offset: -1, Timer: true})
	marker, _ := json.Marshal(Marker{Redrive: "rd-1", DeliveryID: "d1", By: "alice", Reason: "fixed", At: now})
	recs := []*kgo.Record{
		{Key: []byte("d1"), Value: cmd("d1", 0), Headers: sinkHeaders("permanent: SENDER_ID_MISMATCH", "1")},
		{Key: []byte("d2"), Value: cmd("d2", now.Add(-time.Minute).UnixMilli()), Headers: sinkHeaders("retries exhausted after retryable: UNAVAILABLE", "8")},
		{Key: []byte("n-x"), Value: sd, Headers: []kgo.RecordHeader{{Key: stage.HeaderDeadLetter, Value: []byte("dedupe")}}},
		{Key: []byte("d3"), Value: []byte("{not json"), Headers: []kgo.RecordHeader{{Key: "herald-reason", Value: []byte("unreadable delivery command: bad")},
			{Key: "herald-source", Value: []byte("herald.deliveries.fcm/1@7")}}},
		{Key: []byte("d1"), Value: marker, Headers: []kgo.RecordHeader{{Key: HeaderRedriven, Value: []byte("0-0")}}},
		{Key: []byte("acme/u1"), Value: timer, Headers: []kgo.RecordHeader{{Key: stage.HeaderDeadLetter, Value: []byte("route")}}},
	}
	for i, r := range recs {
		r.Offset, r.Timestamp = int64(i), now.Add(time.Duration(i)*time.Second)
	}
	return recs
}

func TestEachKindOfDeadLetterIsReadWithItsStageClassAndRedrives(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	set := build(topicRecords(t, now))
	cases := []struct {
		id, kind, stage, class string
		redriven               bool
		skip                   string // why a redrive skips it ("" redriven)
	}{
		{"0-0", KindDelivery, "sink.fcm", ClassPermanent, true, "redriven already, by alice"},
		{"0-1", KindDelivery, "sink.fcm", ClassExhausted, false, "its command expired"},
		{"0-2", KindStage, "dedupe", ClassUnwritable, false, ""},
		{"0-3", KindUnreadable, "sink.fcm", ClassUnreadable, false, "an unreadable delivery command"},
		{"0-5", KindStage, "route", ClassUnwritable, false, "a timer's output"},
	}
	if len(set.Letters) != len(cases) {
		t.Fatalf("%d letters, want %d (the marker is not one)", len(set.Letters), len(cases))
	}
	for _, tc := range cases {
		t.Run(tc.id+" is a "+tc.kind+" dead letter of "+tc.stage, func(t *testing.T) {
			l := set.Get(tc.id)
			if l == nil {
				t.Fatal("not found")
			}
			if l.Kind != tc.kind || l.Stage != tc.stage || l.Class != tc.class || l.Redriven() != tc.redriven {
				t.Errorf("kind %s stage %s class %s redriven %v", l.Kind, l.Stage, l.Class, l.Redriven())
			}
			if why := skip(l, now); !strings.HasPrefix(why, tc.skip) || (tc.skip == "") != (why == "") {
				t.Errorf("a redrive skips it because %q, want %q", why, tc.skip)
			}
			if b, _ := json.Marshal(l.Input()); strings.Contains(string(b), "a-long-secret-token") {
				t.Errorf("its input shows the token: %s", b)
			}
		})
	}
}

func TestFiltersSelectWhatTheySay(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	set := build(topicRecords(t, now))
	cases := []struct {
		name string
		f    Filter
		want []string
	}{
		{"no filter selects all", Filter{}, []string{"0-0", "0-1", "0-2", "0-3", "0-5"}},
		{"stage sink selects every sink's", Filter{Stage: "sink"}, []string{"0-0", "0-1", "0-3"}},
		{"a stage by name", Filter{Stage: "dedupe"}, []string{"0-2"}},
		{"a class", Filter{Class: ClassUnwritable}, []string{"0-2", "0-5"}},
		{"a class", Filter{Class: ClassExhausted}, []string{"0-1"}},
		{"error text, case-insensitive", Filter{Reason: "sender_id"}, []string{"0-0"}},
		{"a tenant: stages' letters have none", Filter{Tenant: "acme"}, []string{"0-0", "0-1"}},
		{"a time range is [since, until)", Filter{Since: now.Add(time.Second), Until: now.Add(3 * time.Second)}, []string{"0-1", "0-2"}},
		{"ids", Filter{IDs: []string{"0-3", "0-0"}}, []string{"0-0", "0-3"}},
		{"never redriven", Filter{Redriven: "no", Channel: "fcm"}, []string{"0-1", "0-3"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, l := range set.Select(tc.f) {
				got = append(got, l.ID)
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("selects %v, want %v", got, tc.want)
			}
		})
	}
	counts := Counts(set.Letters)
	if len(counts) != 5 || counts[0].Letters != 1 || counts[0].Redriven != 1 || counts[2].Stage != "dedupe" || counts[4].Stage != "route" {
		t.Errorf("counts %+v", counts)
	}
}

func TestABadFilterIsRefusedNamingTheField(t *testing.T) {
	now := time.Now()
	cases := []struct {
		name  string
		f     Filter
		field string
	}{
		{"an id that is not a position", Filter{IDs: []string{"3:1"}}, "id"},
		{"an id with a sign", Filter{IDs: []string{"+3-1"}}, "id"},
		{"an unknown class", Filter{Class: "fatal"}, "class"},
		{"redriven other than yes or no", Filter{Redriven: "maybe"}, "redriven"},
		{"until not after since", Filter{Since: now, Until: now}, "until"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.f.Check()
			if err == nil || !strings.HasPrefix(err.Error(), tc.field+" ") {
				t.Errorf("error %v, want one about %s", err, tc.field)
			}
		})
	}
	if err := (Filter{IDs: []string{"0-12"}, Class: ClassPermanent}).Check(); err != nil {
		t.Errorf("a good filter is refused: %v", err)
	}
}
