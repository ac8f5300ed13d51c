package api

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks"
	"github.com/heraldhq/herald/sinks/deadletters"
	"github.com/heraldhq/herald/topics"
)

func TestDeadLettersAreListedShownAndRedrivenPerTenantOnTheRealBroker(t *testing.T) {
	brokers := testenv.Kafka(t)
	cat := testenv.Catalog(t, brokers, 2)
	// Three failed deliveries as an APNs sink dead-letters them: two of
	// tenant ta, one of tb.
	cl := testenv.Client(t, brokers, kgo.RecordPartitioner(cat.Partitioner()))
	for _, c := range []struct{ tenant, delivery string }{{"ta", "d-a1"}, {"ta", "d-a2"}, {"tb", "d-b1"}} {
		cmd := &schemas.DeliveryCommand{DeliveryID: c.delivery, NotificationID: "n-" + c.delivery, Tenant: c.tenant, Type: "t", Recipient: "u1",
			DeviceID: "dev", Channel: "apns", Token: "secret-token-" + c.delivery, CollapseID: "n", Title: "x", Body: "b"}
		b, err := schemas.Encode(cmd)
		if err != nil {
			t.Fatal(err)
		}
		rec := &kgo.Record{Topic: cat.Name(topics.DeadLetters), Key: []byte(c.delivery), Value: b, Headers: []kgo.RecordHeader{
			{Key: schemas.HeaderSchema, Value: []byte(schemas.NameOf(cmd))},
			{Key: "herald-reason", Value: []byte("permanent: BadTopic")},
			{Key: "herald-attempts", Value: []byte("1")},
			{Key: "herald-source", Value: []byte("sink.apns")},
		}}
		if err := cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	s := unstarted(t, func(c *Config) { c.Brokers, c.Catalog = brokers, cat })

	list := func(key, query string) (out struct {
		DeadLetters []deadletters.Letter `json:"deadLetters"`
		Counts      []deadletters.Count  `json:"counts"`
	}) {
		t.Helper()
		w := do(t, s, "GET", "/v1/deadletters"+query, key, "")
		if w.Code != http.StatusOK {
			t.Fatalf("GET /v1/deadletters%s: %d %s", query, w.Code, w.Body)
		}
		if strings.Contains(w.Body.String(), "secret-token") {
			t.Errorf("the list shows a device token: %s", w.Body)
		}
		if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	a := list(keyA, "")
	idOf := map[string]string{}
	for _, l := range a.DeadLetters {
		idOf[l.DeliveryID] = l.ID
	}
	idOf["d-b1"] = list(keyB, "").DeadLetters[0].ID

	t.Run("a tenant lists only its own dead letters, with counts by reason", func(t *testing.T) {
		if len(a.DeadLetters) != 2 || a.DeadLetters[0].Tenant != "ta" || a.DeadLetters[1].Tenant != "ta" {
			t.Fatalf("tenant ta lists %+v", a.DeadLetters)
		}
		if len(a.Counts) != 1 || a.Counts[0].Letters != 2 || a.Counts[0].Class != "permanent" || a.Counts[0].Reason != "permanent: BadTopic" {
			t.Errorf("counts %+v", a.Counts)
		}
		if got := list(keyA, "?class=exhausted"); len(got.DeadLetters) != 0 {
			t.Errorf("class=exhausted lists %d", len(got.DeadLetters))
		}
	})

	t.Run("one dead letter shows its input with the token masked, and only to its tenant", func(t *testing.T) {
		if w := do(t, s, "GET", "/v1/deadletters/"+idOf["d-b1"], keyA, ""); w.Code != http.StatusNotFound {
			t.Fatalf("another tenant's dead letter: %d, want 404", w.Code)
		}
		w := do(t, s, "GET", "/v1/deadletters/"+idOf["d-b1"], keyB, "")
		if w.Code != http.StatusOK || strings.Contains(w.Body.String(), "secret-token") || !strings.Contains(w.Body.String(), `"token":"…d-b1"`) {
			t.Fatalf("GET: %d %s", w.Code, w.Body)
		}
	})

	t.Run("bad input is refused naming the field", func(t *testing.T) {
		for _, tc := range []struct{ method, path, body, field string }{
			{"GET", "/v1/deadletters?class=bogus", "", "query:class"},
			{"GET", "/v1/deadletters?since=yesterday", "", "query:since"},
			{"GET", "/v1/deadletters/nope", "", "path:id"},
			{"POST", "/v1/deadletters:redrive", `{"dryRun":true}`, "reason"},
			{"POST", "/v1/deadletters:redrive", `{"reason":"x","ids":["1"]}`, "ids[0]"},
		} {
			w := do(t, s, tc.method, tc.path, keyA, tc.body)
			if w.Code != http.StatusUnprocessableEntity {
				t.Fatalf("%s %s: %d, want 422", tc.method, tc.path, w.Code)
			}
			if p := problemOf(t, w); len(p.Errors) == 0 || p.Errors[0].Field != tc.field {
				t.Errorf("%s %s %s: errors %+v, want field %s", tc.method, tc.path, tc.body, p.Errors, tc.field)
			}
		}
	})

	redrive := func(key, body string) deadletters.Report {
		t.Helper()
		w := do(t, s, "POST", "/v1/deadletters:redrive", key, body)
		if w.Code != http.StatusOK {
			t.Fatalf("POST %s: %d %s", body, w.Code, w.Body)
		}
		var rep deadletters.Report
		if err := json.Unmarshal(w.Body.Bytes(), &rep); err != nil {
			t.Fatal(err)
		}
		return rep
	}
	t.Run("a redrive sends back the tenant's selection once, audited with the key's name", func(t *testing.T) {
		if rep := redrive(keyA, `{"reason":"checking","dryRun":true}`); !rep.DryRun || len(rep.Redriven) != 2 {
			t.Fatalf("dry run: %+v", rep)
		}
		if rep := redrive(keyA, `{"reason":"topic fixed","ids":["`+idOf["d-b1"]+`"]}`); len(rep.Redriven)+len(rep.Skipped) != 0 {
			t.Fatalf("tenant ta redrove tb's dead letter: %+v", rep)
		}
		body := `{"reason":"topic fixed","ids":["` + idOf["d-a1"] + `"]}`
		if rep := redrive(keyA, body); len(rep.Redriven) != 1 || rep.Redriven[0].DeliveryID != "d-a1" {
			t.Fatalf("redrive: %+v", rep)
		}
		if rep := redrive(keyA, body); len(rep.Redriven) != 0 || len(rep.Skipped) != 1 {
			t.Fatalf("the same redrive again: %+v", rep)
		}
		cmds := testenv.ReadCommitted(t, brokers, cat.Name(topics.Deliveries("apns")))
		if len(cmds) != 1 || string(cmds[0].Key) != "d-a1" {
			t.Fatalf("%d commands on the deliveries topic, want d-a1's once", len(cmds))
		}
		if n, ok := sinks.RedriveOf(cmds[0]); !ok || n != 1 {
			t.Errorf("the command's redrive header says attempt %d (%v)", n, ok)
		}
		var audited []schemas.Decision
		for _, r := range testenv.ReadCommitted(t, brokers, cat.Name(topics.Decisions)) {
			var d schemas.Decision
			if schemas.Decode(r.Value, &d) == nil && d.Outcome == schemas.DecisionRedriven {
				audited = append(audited, d)
			}
		}
		if len(audited) != 1 || audited[0].Producer != "api-key:svc-a" || audited[0].Tenant != "ta" || !strings.Contains(audited[0].Detail, "topic fixed") {
			t.Errorf("audit %+v", audited)
		}
	})
}
