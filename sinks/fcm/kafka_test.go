package fcm_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/internal/backoff"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks"
	"github.com/heraldhq/herald/sinks/fcm"
	"github.com/heraldhq/herald/sinks/fcm/emulator"
	"github.com/heraldhq/herald/sinks/sinktest"
)

func TestTheFCMSinkDoesWhatTheTableSaysOnTheRealBroker(t *testing.T) {
	brokers := testenv.Kafka(t)
	cat := testenv.Catalog(t, brokers, 2)
	em, err := emulator.Start(emulator.Options{ProjectID: "herald-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { em.Close() })
	p, err := fcm.New(context.Background(), fcm.Config{Endpoint: em.URL() + "/v1", CredentialsJSON: em.ServiceAccountJSON()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.CloseIdleConnections)

	cases := []struct {
		name     string
		token    string
		rules    []emulator.Rule
		outcome  string
		results  string
		messages int
		dead     bool
		retired  bool
	}{
		{"a 200 is delivered with one request", "fcm-ok-token", nil, schemas.OutcomeDelivered, "sent", 1, false, false},
		{"UNREGISTERED retires the device", "fcm-unregistered", []emulator.Rule{{Reason: "UNREGISTERED"}}, schemas.OutcomeDeviceRetired, "permanent", 1, false, true},
		{"a malformed token retires the device", "bad token", nil, schemas.OutcomeDeviceRetired, "permanent", 1, false, true},
		{"SENDER_ID_MISMATCH fails and is dead-lettered", "fcm-mismatch", []emulator.Rule{{Reason: "SENDER_ID_MISMATCH"}}, schemas.OutcomeFailed, "permanent", 1, true, false},
		{"UNAVAILABLE and INTERNAL are retried, one request per attempt", "fcm-flaky-token",
			[]emulator.Rule{{Reason: "UNAVAILABLE", Times: 1}, {Reason: "INTERNAL", Times: 1}}, schemas.OutcomeDelivered, "retryable,retryable,sent", 3, false, false},
		{"a reset is ambiguous and retried", "fcm-reset-token", []emulator.Rule{{Reset: true, Times: 1}}, schemas.OutcomeDelivered, "ambiguous,sent", 2, false, false},
	}
	var cmds []*schemas.DeliveryCommand
	for i, tc := range cases {
		for _, r := range tc.rules {
			r.Token = tc.token
			em.AddRule(r)
		}
		n := identity.DedupeID("acme", "t", "u1", fmt.Sprint("n", i))
		dev := fmt.Sprint("a", i)
		cmds = append(cmds, &schemas.DeliveryCommand{DeliveryID: identity.DeliveryID(n, dev), NotificationID: n, Tenant: "acme", Type: "t",
			Recipient: "u1", DeviceID: dev, Channel: "fcm", Token: tc.token, CollapseID: n, Title: "t", Body: "b",
			CreatedAt: time.Now().UnixMilli(), ExpiresAt: time.Now().Add(time.Hour).UnixMilli()})
	}
	sinktest.RegisterDevices(t, brokers, cat, cmds...)
	sinktest.Start(t, sinks.Options{
		Instance: stage.Instance{Brokers: brokers},
		Channel:  "fcm",
		Provider: p,
		Catalog:  cat,
		Policy:   sinks.Policy{MaxAttempts: 4, Backoff: backoff.Policy{Min: 100 * time.Millisecond, Max: 500 * time.Millisecond}},
	})
	sinktest.Produce(t, brokers, cat, cmds...)
	ids := make([]string, len(cmds))
	for i, c := range cmds {
		ids[i] = c.DeliveryID
	}
	a := sinktest.AwaitOutcomes(t, brokers, cat, ids...)
	got := map[string]int{}
	for _, m := range em.Received() {
		got[m.Token]++
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := cmds[i]
			if o := a.Outcomes[c.DeliveryID]; len(o) != 1 || o[0].Status != tc.outcome {
				t.Fatalf("outcomes %+v, want one %s", o, tc.outcome)
			}
			var results []string
			for _, at := range a.Attempts[c.DeliveryID] {
				results = append(results, at.Result)
			}
			if strings.Join(results, ",") != tc.results {
				t.Fatalf("attempts %v, want %s", results, tc.results)
			}
			if got[tc.token] != tc.messages {
				t.Fatalf("the emulator read %d requests, want %d (one per attempt)", got[tc.token], tc.messages)
			}
			if (a.Dead[c.DeliveryID] > 0) != tc.dead {
				t.Fatalf("dead letters %d, want dead-lettered %v", a.Dead[c.DeliveryID], tc.dead)
			}
			d, found := a.Devices[c.DeviceID]
			if found != tc.retired || found && (d.Enabled || d.Platform != "android" || d.Token != tc.token) {
				t.Fatalf("device update %+v (found %v), want retired %v", d, found, tc.retired)
			}
		})
	}
}
