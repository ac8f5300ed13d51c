package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sdk"
	"github.com/heraldhq/herald/topics"
)

// historyRecords is the size of the history a restarted API's read model
// has to read before it reaches new decisions: half decisions, half
// attempts, as a day of traffic leaves them.
const historyRecords = 60_000

// writeHistory produces n/2 decisions and n/2 attempts of another tenant.
func (p *pipeline) writeHistory(t *testing.T, n int) {
	t.Helper()
	cl := testenv.Client(t, p.brokers, kgo.RecordPartitioner(p.cat.Partitioner()), kgo.ProducerBatchMaxBytes(1<<20))
	var (
		mu   sync.Mutex
		perr error
		wg   sync.WaitGroup
	)
	done := func(_ *kgo.Record, err error) {
		defer wg.Done()
		if err != nil {
			mu.Lock()
			perr = err
			mu.Unlock()
		}
	}
	for i := range n / 2 {
		id := identity.NewRandomID()
		d := schemas.Decision{DecisionID: fmt.Sprintf("history/%d", i), Stage: "dedupe", Outcome: schemas.DecisionAccepted,
			RequestID: identity.NewRandomID(), Tenant: "history", Type: "history.type", Recipient: fmt.Sprintf("u%d", i%997),
			NotificationID: id, At: int64(i), SourceTopic: p.cat.Name(topics.Requests), SourceOffset: int64(i)}
		a := schemas.Attempt{DeliveryID: identity.NewRandomID(), NotificationID: id, Tenant: "history", Channel: "apns",
			DeviceID: "phone", Attempt: 1, Result: schemas.AttemptSent, At: int64(i)}
		for _, rec := range []struct {
			topic, key string
			v          schemas.Record
		}{{p.cat.Name(topics.Decisions), id, &d}, {p.cat.Name(topics.Attempts), a.DeliveryID, &a}} {
			b, err := schemas.Encode(rec.v)
			if err != nil {
				t.Fatal(err)
			}
			wg.Add(1)
			cl.Produce(context.Background(), &kgo.Record{Topic: rec.topic, Key: []byte(rec.key), Value: b}, done)
		}
	}
	wg.Wait()
	if perr != nil {
		t.Fatalf("write history: %v", perr)
	}
}

// restart closes the API and starts a new instance on the same topics,
// with the same configuration changed by mod.
func (p *pipeline) restart(t *testing.T, mod func(*Config)) {
	t.Helper()
	if err := p.srv.Close(); err != nil {
		t.Fatal(err)
	}
	cfg := p.cfg
	if mod != nil {
		mod(&cfg)
	}
	p.serve(t, cfg)
}

func TestARestartedAPIAnswersReplaysAndConflictsAtOnce(t *testing.T) {
	p := startPipeline(t, nil)
	p.writeHistory(t, historyRecords)

	body := `{"type":"invoice.paid","recipients":["u1","u2"],"title":"Paid","body":"Thanks","payload":{"invoice":"inv_1"}}`
	first := p.call(t, "POST", "/v1/notifications", keyA, body, "Idempotency-Key", "restart-1")
	if first.status != 202 {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	orig := decode[sdk.SendResult](t, first)
	for _, n := range orig.Notifications {
		if n.Status != schemas.DecisionAccepted {
			t.Fatalf("first: %s, want every notification accepted", first.body)
		}
	}

	// The restarted API's read model reads nothing of the history until
	// released: the answers below cannot come from its catch-up.
	hold := make(chan struct{})
	p.restart(t, func(c *Config) { c.holdReadModel = hold })

	t.Run("a replay right after the restart answers byte for byte as the original", func(t *testing.T) {
		again := p.call(t, "POST", "/v1/notifications", keyA, body, "Idempotency-Key", "restart-1")
		if again.status != 202 || again.header.Get(headerReplayed) != "true" {
			t.Fatalf("replay: %d (replayed %q) %s", again.status, again.header.Get(headerReplayed), again.body)
		}
		if !bytes.Equal(again.body, first.body) {
			t.Fatalf("replay answered\n%s\nthe original answered\n%s", again.body, first.body)
		}
	})
	t.Run("a conflicting body right after the restart is a 422", func(t *testing.T) {
		other := strings.Replace(body, "inv_1", "inv_2", 1)
		a := p.call(t, "POST", "/v1/notifications", keyA, other, "Idempotency-Key", "restart-1")
		if a.status != 422 {
			t.Fatalf("conflict: %d %s, want 422", a.status, a.body)
		}
		var prob sdk.Problem
		if err := json.Unmarshal(a.body, &prob); err != nil || prob.Type != probConflict || prob.OriginalRequestID != orig.RequestID {
			t.Fatalf("conflict problem %s, want type %s and the original request id %s", a.body, probConflict, orig.RequestID)
		}
	})
	t.Run("the read model still catches up with the history and the new decisions", func(t *testing.T) {
		close(hold)
		id := orig.Notifications[0].ID
		want := []string{"accepted", "idempotency_conflict", "idempotent_replay"}
		p.eventually(t, "the read model shows every decision of "+id, func() bool {
			rec, ok := p.record(t, id, keyA)
			if !ok {
				return false
			}
			var got []string
			for _, e := range rec.Timeline {
				if e.Kind == sdk.EventDecision {
					got = append(got, e.Outcome)
				}
			}
			slices.Sort(got)
			return slices.Equal(got, want)
		})
	})
}
