package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/metrics"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/processors/dedupe"
	routestage "github.com/heraldhq/herald/processors/route"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sdk"
	"github.com/heraldhq/herald/topics"
)

// pipeline is the API and the dedupe stage running in-process against the
// real broker, on topics of their own.
type pipeline struct {
	brokers []string
	cat     *topics.Catalog
	cfg     Config
	srv     *Server
	url     string
}

// patience bounds every wait for the pipeline; it guards against a hang
// and asserts no speed.
const patience = 90 * time.Second

func startPipeline(t *testing.T, mod func(*Config)) *pipeline {
	return startPipelineWith(t, true, mod)
}

// startPipelineWith starts the API, and the dedupe stage when withStage.
func startPipelineWith(t *testing.T, withStage bool, mod func(*Config)) *pipeline {
	t.Helper()
	brokers := testenv.Kafka(t)
	cat := testenv.Catalog(t, brokers, 3)
	quiet := slog.New(slog.DiscardHandler)

	ctx, cancel := context.WithCancel(context.Background())
	if !withStage {
		cancel()
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if !withStage {
			return
		}
		err := dedupe.Run(ctx, dedupe.Options{
			Instance: stage.Instance{Brokers: brokers, Group: "g-" + cat.Name(""), InstanceID: "i1", Logger: quiet},
			Catalog:  cat,
			Policy:   dedupe.DefaultPolicy(),
		})
		if err != nil {
			t.Errorf("dedupe stage: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })

	cfg := Config{Brokers: brokers, Catalog: cat, Keys: testKeys(), IdempotencyWait: patience, Logger: quiet}
	if mod != nil {
		mod(&cfg)
	}
	p := &pipeline{brokers: brokers, cat: cat, cfg: cfg}
	p.serve(t, cfg)
	p.eventually(t, "the replica is ready", func() bool { return p.srv.rep.ready.Load() })
	return p
}

// serve starts an API server with cfg behind an HTTP test server, closed
// when the test ends, and makes it the pipeline's.
func (p *pipeline) serve(t *testing.T, cfg Config) {
	t.Helper()
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	p.srv, p.url = srv, hs.URL
}

func (p *pipeline) eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting until %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

type answer struct {
	status int
	header http.Header
	body   []byte
}

func (p *pipeline) call(t *testing.T, method, path, key, body string, hdr ...string) answer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, p.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{resp.StatusCode, resp.Header, b}
}

// record reads notification id as the tenant of key sees it; false when
// the answer is not 200, as while the read model (eventually consistent)
// has not read the notification yet.
func (p *pipeline) record(t *testing.T, id, key string) (sdk.NotificationRecord, bool) {
	t.Helper()
	a := p.call(t, "GET", "/v1/notifications/"+id, key, "")
	if a.status != 200 {
		return sdk.NotificationRecord{}, false
	}
	return decode[sdk.NotificationRecord](t, a), true
}

func decode[T any](t *testing.T, a answer) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(a.body, &v); err != nil {
		t.Fatalf("decode %s: %v", a.body, err)
	}
	return v
}

// decisionsOf reads the committed dedupe decisions about one notification.
func (p *pipeline) decisionsOf(t *testing.T, id string) []schemas.Decision {
	t.Helper()
	var out []schemas.Decision
	for _, r := range testenv.ReadCommitted(t, p.brokers, p.cat.Name(topics.Decisions)) {
		var d schemas.Decision
		if err := schemas.Decode(r.Value, &d); err != nil {
			t.Fatal(err)
		}
		if d.NotificationID == id {
			out = append(out, d)
		}
	}
	return out
}

func outcomes(ds []schemas.Decision) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.Outcome)
	}
	slices.Sort(out)
	return out
}

func TestTheAPIOnTheRealBroker(t *testing.T) {
	p := startPipeline(t, nil)

	t.Run("a replay answers exactly as the original did", func(t *testing.T) {
		body := `{"type":"invoice.paid","recipients":["u1","u2"],"title":"Paid","body":"Thanks","key":{"invoice":"inv_1"}}`
		first := p.call(t, "POST", "/v1/notifications", keyA, body, "Idempotency-Key", "replay-1")
		if first.status != 202 || first.header.Get(headerReplayed) != "" {
			t.Fatalf("first: %d %s (replayed %q)", first.status, first.body, first.header.Get(headerReplayed))
		}
		res := decode[sdk.SendResult](t, first)
		for _, n := range res.Notifications {
			if n.Status != schemas.DecisionAccepted {
				t.Fatalf("first: %+v, want every notification accepted", res.Notifications)
			}
		}
		again := p.call(t, "POST", "/v1/notifications", keyA, body, "Idempotency-Key", "replay-1")
		if again.status != first.status || again.header.Get(headerReplayed) != "true" {
			t.Fatalf("replay: %d (replayed %q) %s", again.status, again.header.Get(headerReplayed), again.body)
		}
		if !bytes.Equal(again.body, first.body) {
			t.Fatalf("replay answered\n%s\nthe original answered\n%s", again.body, first.body)
		}
		for _, n := range res.Notifications {
			if got := outcomes(p.decisionsOf(t, n.ID)); !slices.Equal(got, []string{"accepted", "idempotent_replay"}) {
				t.Fatalf("decisions of %s: %v", n.ID, got)
			}
		}
	})

	t.Run("an idempotency key reused with a different body is a 422", func(t *testing.T) {
		body := `{"type":"invoice.paid","recipientId":"u3","title":"Paid","body":"Thanks"}`
		first := p.call(t, "POST", "/v1/notifications", keyA, body, "Idempotency-Key", "conflict-1")
		if first.status != 202 {
			t.Fatalf("first: %d %s", first.status, first.body)
		}
		orig := decode[sdk.SendResult](t, first)
		other := strings.Replace(body, "Thanks", "Thanks again", 1)
		for i := 0; i < 2; i++ { // the conflict answers the same every time
			a := p.call(t, "POST", "/v1/notifications", keyA, other, "Idempotency-Key", "conflict-1")
			if a.status != 422 {
				t.Fatalf("conflict: %d %s", a.status, a.body)
			}
			var prob sdk.Problem
			if err := json.Unmarshal(a.body, &prob); err != nil || prob.Type != probConflict || prob.OriginalRequestID != orig.RequestID {
				t.Fatalf("conflict problem %s, want type %s and the original request id %s", a.body, probConflict, orig.RequestID)
			}
		}
		if got := outcomes(p.decisionsOf(t, orig.Notifications[0].ID)); !slices.Equal(got, []string{"accepted", "idempotency_conflict", "idempotency_conflict"}) {
			t.Fatalf("decisions: %v", got)
		}
	})

	t.Run("a body that differs only in its payload is a 422", func(t *testing.T) {
		cases := []struct{ name, first, second string }{
			{"a payload value changed", `{"orderId":"o_1","total":12}`, `{"orderId":"o_1","total":13}`},
			{"an integer beyond 2^53 changed by one", `{"orderId":9007199254740993}`, `{"orderId":9007199254740992}`},
		}
		for i, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				key := fmt.Sprintf("payload-conflict-%d", i)
				body := func(payload string) string {
					return `{"type":"order.paid","recipientId":"u-payload-` + key + `","title":"Paid","body":"Thanks","payload":` + payload + `}`
				}
				first := p.call(t, "POST", "/v1/notifications", keyA, body(c.first), "Idempotency-Key", key)
				if first.status != 202 {
					t.Fatalf("first: %d %s", first.status, first.body)
				}
				orig := decode[sdk.SendResult](t, first)
				same := p.call(t, "POST", "/v1/notifications", keyA, body(c.first), "Idempotency-Key", key)
				if same.status != 202 || same.header.Get(headerReplayed) != "true" || !bytes.Equal(same.body, first.body) {
					t.Fatalf("the same payload again: %d (replayed %q) %s", same.status, same.header.Get(headerReplayed), same.body)
				}
				a := p.call(t, "POST", "/v1/notifications", keyA, body(c.second), "Idempotency-Key", key)
				if a.status != 422 {
					t.Fatalf("payload %s after %s: %d %s, want 422", c.second, c.first, a.status, a.body)
				}
				var prob sdk.Problem
				if err := json.Unmarshal(a.body, &prob); err != nil || prob.Type != probConflict || prob.OriginalRequestID != orig.RequestID {
					t.Fatalf("conflict problem %s, want type %s and the original request id %s", a.body, probConflict, orig.RequestID)
				}
			})
		}
	})

	t.Run("a retry after a timeout makes one notification", func(t *testing.T) {
		// The first attempt reaches the API and is written, but its answer
		// never reaches the client, which times out and retries.
		var attempts atomic.Int32
		var keys sync.Map
		lossy := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			keys.Store(r.Header.Get("Idempotency-Key"), true)
			if attempts.Add(1) == 1 {
				p.srv.ServeHTTP(httptest.NewRecorder(), r)
				<-r.Context().Done()
				return
			}
			p.srv.ServeHTTP(w, r)
		})
		hs := httptest.NewServer(lossy)
		defer hs.Close()
		c := sdk.NewClient(hs.URL, keyA)
		c.AttemptTimeout = 3 * time.Second
		c.MaxAttempts = 10
		c.MinBackoff = 10 * time.Millisecond
		res, err := c.Send(context.Background(), sdk.Notification{Type: "order.shipped", Recipients: []string{"u4"}, Title: "Shipped", Body: "On its way"})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		keys.Range(func(any, any) bool { n++; return true })
		if attempts.Load() < 2 || n != 1 {
			t.Fatalf("%d attempts with %d idempotency keys, want at least 2 attempts with one key", attempts.Load(), n)
		}
		if !res.Replayed || res.Notifications[0].Status != schemas.DecisionAccepted {
			t.Fatalf("answer %+v, want the replayed accepted original", res)
		}
		ds := p.decisionsOf(t, res.Notifications[0].ID)
		accepted := slices.DeleteFunc(slices.Clone(ds), func(d schemas.Decision) bool { return d.Outcome != schemas.DecisionAccepted })
		if len(accepted) != 1 || len(ds) != int(attempts.Load()) {
			t.Fatalf("decisions %v for %d attempts, want one accepted and the rest replays", outcomes(ds), attempts.Load())
		}
	})

	t.Run("a send to many recipients is one call with an id each", func(t *testing.T) {
		a := p.call(t, "POST", "/v1/notifications", keyA, `{"type":"digest","recipients":["m1","m2","m3"],"title":"t","body":"b","dedupeKey":"d-1"}`, "Prefer", "wait=60")
		if a.status != 202 {
			t.Fatalf("%d %s", a.status, a.body)
		}
		res := decode[sdk.SendResult](t, a)
		ids := map[string]bool{}
		for i, n := range res.Notifications {
			ids[n.ID] = true
			if want, _, _ := sdk.DeriveID("ta", "digest", n.Recipient, nil, "d-1", ""); n.ID != want || n.Recipient != fmt.Sprintf("m%d", i+1) {
				t.Fatalf("notification %d: %+v, want id %s", i, n, want)
			}
		}
		if len(ids) != 3 {
			t.Fatalf("ids %v, want 3 distinct", ids)
		}
		var inCall int
		for _, r := range testenv.ReadCommitted(t, p.brokers, p.cat.Name(topics.Requests)) {
			var rq schemas.Request
			if err := schemas.Decode(r.Value, &rq); err == nil && rq.RequestID == res.RequestID {
				inCall++
				if string(r.Key) != rq.NotificationID {
					t.Fatalf("record key %s, want the notification id %s", r.Key, rq.NotificationID)
				}
			}
		}
		if inCall != 3 {
			t.Fatalf("%d committed request records of the call, want 3", inCall)
		}
		// The same send again is a duplicate: skipped, with the reason.
		a = p.call(t, "POST", "/v1/notifications", keyA, `{"type":"digest","recipients":["m1"],"title":"t","body":"b","dedupeKey":"d-1"}`, "Prefer", "wait=60")
		dup := decode[sdk.SendResult](t, a)
		if len(dup.Skipped) != 1 || dup.Skipped[0].Reason != schemas.DecisionDuplicate || dup.Notifications[0].Status != schemas.DecisionDuplicate {
			t.Fatalf("repeat: %s, want one skipped duplicate", a.body)
		}
	})

	t.Run("explain is answered by the dedupe stage, reads the send it follows, and changes nothing", func(t *testing.T) {
		body := `{"type":"promo","recipientId":"e1","title":"t","body":"b","dedupeKey":"promo-7","idempotencyKey":"ex-1"}`
		for range 2 { // an explain changes nothing: the second is answered as the first
			ex := decode[sdk.Explanation](t, p.call(t, "POST", "/v1/explain", keyA, body))
			if ex.WouldDeduplicate || ex.WouldReplay || ex.Consistency != ConsistencyReadYourWrites {
				t.Fatalf("before any send: %+v", ex)
			}
		}
		if a := p.call(t, "POST", "/v1/notifications", keyA, body); a.status != 202 || decode[sdk.SendResult](t, a).Notifications[0].Status != schemas.DecisionAccepted {
			t.Fatalf("send: %d %s, want it accepted (the explains before it changed nothing)", a.status, a.body)
		}
		if ex := decode[sdk.Explanation](t, p.call(t, "POST", "/v1/explain", keyA, body)); !ex.WouldReplay {
			t.Fatalf("right after the send was answered: %+v, want wouldReplay", ex)
		}
		// The explains are records on herald.requests too: the read model
		// skips them, so the notification shows the one request it had.
		id := decode[sdk.Explanation](t, p.call(t, "POST", "/v1/explain", keyA, body)).Notifications[0].ID
		p.eventually(t, "the read model holds the send's decision", func() bool {
			rec, ok := p.record(t, id, keyA)
			return ok && rec.Status != sdk.StatusPending
		})
		rec, _ := p.record(t, id, keyA)
		requested := 0
		for _, e := range rec.Timeline {
			if e.Kind == sdk.EventRequested {
				requested++
			}
		}
		if requested != 1 {
			t.Fatalf("the timeline shows %d requests, want the one send (not its explains): %+v", requested, rec.Timeline)
		}
		other := strings.Replace(body, `"ex-1"`, `"ex-2"`, 1)
		if ex := decode[sdk.Explanation](t, p.call(t, "POST", "/v1/explain", keyA, other)); !ex.WouldDeduplicate || ex.WouldReplay {
			t.Fatalf("another idempotency key, same dedupe key: %+v, want wouldDeduplicate", ex)
		}
		if ex := decode[sdk.Explanation](t, p.call(t, "POST", "/v1/explain", keyB, body)); ex.WouldDeduplicate || ex.WouldReplay {
			t.Fatalf("another tenant: %+v, want nothing seen", ex)
		}
	})

	t.Run("tenants cannot see or touch each other's notifications, devices or preferences", func(t *testing.T) {
		a := p.call(t, "POST", "/v1/notifications", keyA, `{"type":"secret","recipientId":"shared-user","title":"t","body":"b","key":{"n":1}}`, "Prefer", "wait=60")
		id := decode[sdk.SendResult](t, a).Notifications[0].ID
		// The read model sees the request before the stage's decision: wait
		// for the decision, then check the record.
		p.eventually(t, "the owner reads its decided notification", func() bool {
			rec, ok := p.record(t, id, keyA)
			return ok && rec.Status != sdk.StatusPending
		})
		rec := decode[sdk.NotificationRecord](t, p.call(t, "GET", "/v1/notifications/"+id, keyA, ""))
		if rec.Status != schemas.DecisionAccepted || rec.Title != "t" || len(rec.Timeline) < 2 {
			t.Fatalf("record %+v", rec)
		}
		if s := p.call(t, "GET", "/v1/notifications/"+id, keyB, "").status; s != 404 {
			t.Fatalf("another tenant's GET: %d, want 404", s)
		}
		dev := `{"platform":"ios","token":"tok-1"}`
		if s := p.call(t, "PUT", "/v1/users/shared-user/devices/d1", keyA, dev).status; s != 201 {
			t.Fatalf("register: %d", s)
		}
		for _, c := range []struct{ method, path string }{
			{"GET", "/v1/users/shared-user/devices/d1"},
			{"DELETE", "/v1/users/shared-user/devices/d1"},
		} {
			if s := p.call(t, c.method, c.path, keyB, "").status; s != 404 {
				t.Fatalf("another tenant's %s %s: %d, want 404", c.method, c.path, s)
			}
		}
		if l := decode[sdk.DeviceList](t, p.call(t, "GET", "/v1/users/shared-user/devices", keyB, "")); len(l.Devices) != 0 {
			t.Fatalf("another tenant lists %+v", l.Devices)
		}
		if s := p.call(t, "PUT", "/v1/users/shared-user/preferences", keyA, `{"channels":{"apns":false}}`).status; s != 200 {
			t.Fatalf("preferences: %d", s)
		}
		if s := p.call(t, "GET", "/v1/users/shared-user/preferences", keyB, "").status; s != 404 {
			t.Fatalf("another tenant's preferences: %d, want 404", s)
		}
		if s := p.call(t, "DELETE", "/v1/users/shared-user/preferences", keyB, "").status; s != 404 {
			t.Fatalf("another tenant's preferences DELETE: %d, want 404", s)
		}
		if s := p.call(t, "DELETE", "/v1/users/shared-user/preferences", keyA, "").status; s != 204 {
			t.Fatalf("preferences DELETE: %d, want 204", s)
		}
		if s := p.call(t, "GET", "/v1/users/shared-user/preferences", keyA, "").status; s != 404 {
			t.Fatalf("preferences after DELETE: %d, want 404", s)
		}
		// A device target resolves only within the tenant.
		if s := p.call(t, "POST", "/v1/notifications", keyB, `{"type":"x","target":{"kind":"device","deviceId":"d1"},"title":"t","body":"b"}`).status; s != 422 {
			t.Fatalf("another tenant's device target: %d, want 422", s)
		}
	})

	t.Run("devices register, rotate tokens and go away; a device target reaches its user", func(t *testing.T) {
		if a := p.call(t, "PUT", "/v1/users/dv/devices/phone", keyA, `{"platform":"android","token":"old"}`); a.status != 201 {
			t.Fatalf("register: %d %s", a.status, a.body)
		}
		a := p.call(t, "PUT", "/v1/users/dv/devices/phone", keyA, `{"platform":"android","token":"new","locale":"fr-FR"}`)
		d := decode[sdk.Device](t, a)
		if a.status != 200 || d.Token != "new" || d.CreatedAt > d.UpdatedAt {
			t.Fatalf("rotate: %d %+v", a.status, d)
		}
		sent := decode[sdk.SendResult](t, p.call(t, "POST", "/v1/notifications", keyA, `{"type":"x","target":{"kind":"device","deviceId":"phone"},"title":"t","body":"b"}`))
		if sent.Notifications[0].Recipient != "dv" {
			t.Fatalf("device target went to %+v, want user dv", sent.Notifications)
		}
		// Device ids are unique per user: a second user's "phone" makes a
		// target without userId ambiguous, and userId picks the device.
		if a := p.call(t, "PUT", "/v1/users/dv2/devices/phone", keyA, `{"platform":"android","token":"dv2"}`); a.status != 201 {
			t.Fatalf("register dv2's phone: %d %s", a.status, a.body)
		}
		p.eventually(t, "the replica holds dv2's phone", func() bool {
			a := p.call(t, "POST", "/v1/notifications", keyA, `{"type":"x","target":{"kind":"device","deviceId":"phone"},"title":"t","body":"b"}`)
			return a.status == 422 && strings.Contains(string(a.body), `"target.userId"`)
		})
		for _, user := range []string{"dv", "dv2"} {
			sent := decode[sdk.SendResult](t, p.call(t, "POST", "/v1/notifications", keyA,
				`{"type":"x","target":{"kind":"device","deviceId":"phone","userId":"`+user+`"},"title":"t","body":"b"}`))
			if len(sent.Notifications) != 1 || sent.Notifications[0].Recipient != user {
				t.Fatalf("device target with userId %s went to %+v", user, sent.Notifications)
			}
		}
		if a := p.call(t, "POST", "/v1/notifications", keyA, `{"type":"x","target":{"kind":"device","deviceId":"tablet","userId":"dv2"},"title":"t","body":"b"}`); a.status != 422 || !strings.Contains(string(a.body), `"target.deviceId"`) {
			t.Fatalf("a device the user does not have: %d %s, want a 422 naming target.deviceId", a.status, a.body)
		}
		if s := p.call(t, "DELETE", "/v1/users/dv2/devices/phone", keyA, "").status; s != 204 {
			t.Fatalf("delete dv2's phone: %d", s)
		}
		if s := p.call(t, "DELETE", "/v1/users/dv/devices/phone", keyA, "").status; s != 204 {
			t.Fatalf("delete: %d", s)
		}
		if s := p.call(t, "GET", "/v1/users/dv/devices/phone", keyA, "").status; s != 404 {
			t.Fatalf("after delete: %d, want 404", s)
		}
		// Commit markers reach the partitions just after the commit returns:
		// read_committed readers see the tombstone a moment later.
		p.eventually(t, "the devices topic holds a tombstone", func() bool {
			for _, r := range testenv.ReadCommitted(t, p.brokers, p.cat.Name(topics.Devices)) {
				if string(r.Key) == schemas.DeviceKey("ta", "dv", "phone") && r.Value == nil {
					return true
				}
			}
			return false
		})
	})
}

func TestAQuotaCountsOnlyAcceptedNotifications(t *testing.T) {
	p := startPipeline(t, func(c *Config) { c.QuotaPerWindow = 2; c.QuotaWindow = time.Hour })
	send := func(body string) answer {
		return p.call(t, "POST", "/v1/notifications", keyA, body, "Prefer", "wait=60")
	}
	first := `{"type":"q","recipientId":"u","title":"t","body":"b","dedupeKey":"q-1"}`
	if a := send(first); a.status != 202 || decode[sdk.SendResult](t, a).Notifications[0].Status != schemas.DecisionAccepted {
		t.Fatalf("first: %d %s, want it accepted", a.status, a.body)
	}
	// The quota's own seen-set copy (the replica's, read only with a
	// quota) holds the first send: its repeat is known not to count.
	p.eventually(t, "the replica holds the first send", func() bool { return p.srv.rep.seen.Len() > 0 })
	if a := send(first); a.status != 202 || decode[sdk.SendResult](t, a).Notifications[0].Status != schemas.DecisionDuplicate {
		t.Fatalf("repeat: %d %s", a.status, a.body)
	}
	if a := send(strings.Replace(first, "q-1", "q-2", 1)); a.status != 202 {
		t.Fatalf("second new send (the repeat did not count): %d %s", a.status, a.body)
	}
	a := send(strings.Replace(first, "q-1", "q-3", 1))
	if a.status != 429 || a.header.Get("Retry-After") == "" {
		t.Fatalf("third new send: %d (Retry-After %q) %s, want 429", a.status, a.header.Get("Retry-After"), a.body)
	}
	if a := send(first); a.status != 202 {
		t.Fatalf("a repeat over the quota: %d %s, want it answered", a.status, a.body)
	}
	if a := p.call(t, "POST", "/v1/notifications", keyB, strings.Replace(first, "q-1", "q-3", 1)); a.status != 202 {
		t.Fatalf("another tenant: %d, want its own quota", a.status)
	}
}

func TestWithoutDecisionsInTimeASendAnswersPending(t *testing.T) {
	reg := metrics.NewRegistry()
	p := startPipelineWith(t, false, func(c *Config) { c.IdempotencyWait = time.Second; c.Metrics = reg })
	a := p.call(t, "POST", "/v1/notifications", keyA, `{"type":"t","recipients":["u1","u2"],"title":"x","body":"y"}`, "Idempotency-Key", "k-1")
	if a.status != 202 || a.header.Get(headerReplayed) != "" {
		t.Fatalf("%d %s", a.status, a.body)
	}
	res := decode[sdk.SendResult](t, a)
	for _, n := range res.Notifications {
		if n.Status != sdk.StatusPending {
			t.Fatalf("notifications %+v, want every one pending", res.Notifications)
		}
	}
	// They are durably in Kafka all the same, in one committed transaction.
	p.eventually(t, "both requests are readable", func() bool {
		return len(testenv.ReadCommitted(t, p.brokers, p.cat.Name(topics.Requests))) == 2
	})
	t.Run("the wait is metered as incomplete", func(t *testing.T) {
		m := scrapeRegistry(t, reg)
		if c, i := m.Sum("herald_api_decision_wait_seconds", "result", "complete"), m.Sum("herald_api_decision_wait_seconds", "result", "incomplete"); c != 0 || i != 1 {
			t.Fatalf("decision waits: %v complete, %v incomplete; want 0 and 1", c, i)
		}
	})
}

// TestAHugePreferWaitWaitsTheCap: a send asking to wait longer than
// MaxWait, however much longer, waits MaxWait for its decisions (there is
// no stage here, so each wait ends incomplete, and is metered so) before
// answering pending.
func TestAHugePreferWaitWaitsTheCap(t *testing.T) {
	reg := metrics.NewRegistry()
	p := startPipelineWith(t, false, func(c *Config) { c.MaxWait = 200 * time.Millisecond; c.Metrics = reg })
	cases := []struct{ name, prefer string }{
		{"a wait a little over the cap waits the cap", "wait=5"},
		{"a wait that overflows a Duration waits the cap", "wait=9223372037"},
		{"a wait too large for an int64 waits the cap", "wait=99999999999999999999"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := p.call(t, "POST", "/v1/notifications", keyA, `{"type":"t","recipients":["u1"],"title":"x","body":"y"}`, "Prefer", tc.prefer)
			if a.status != 202 {
				t.Fatalf("%d %s", a.status, a.body)
			}
			if res := decode[sdk.SendResult](t, a); res.Notifications[0].Status != sdk.StatusPending {
				t.Fatalf("notifications %+v, want pending", res.Notifications)
			}
			if got := scrapeRegistry(t, reg).Sum("herald_api_decision_wait_seconds", "result", "incomplete"); got != float64(i+1) {
				t.Fatalf("%v incomplete waits after %d sends, want %d: this send did not wait", got, i+1, i+1)
			}
		})
	}
}

// TestTheAPIMetersItsGroupCommitAndItsWaitsForDecisions: one send of two
// recipients with Prefer: wait is one committed transaction of one write
// and two records, and one complete wait for decisions; a device write is
// one record produced without a transaction, which the replica reads.
func TestTheAPIMetersItsGroupCommitAndItsWaitsForDecisions(t *testing.T) {
	reg := metrics.NewRegistry()
	p := startPipeline(t, func(c *Config) { c.Metrics = reg })
	a := p.call(t, "POST", "/v1/notifications", keyA, `{"type":"t","recipients":["u1","u2"],"title":"x","body":"y","dedupeKey":"metered"}`, "Prefer", "wait=60")
	if a.status != 202 {
		t.Fatalf("%d %s", a.status, a.body)
	}
	if d := p.call(t, "PUT", "/v1/users/u9/devices/d9", keyA, `{"platform":"ios","token":"aabbcc"}`); d.status/100 != 2 {
		t.Fatalf("device: %d %s", d.status, d.body)
	}
	for _, n := range decode[sdk.SendResult](t, a).Notifications {
		if n.Status != schemas.DecisionAccepted {
			t.Fatalf("%+v, want it accepted", n)
		}
	}
	m := scrapeRegistry(t, reg)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"herald_api_transactions_total", []string{"result", "committed"}, 1},
		{"herald_api_single_records_total", nil, 1},
		{"herald_api_transactions_total", []string{"result", "aborted"}, 0},
		{"herald_api_transaction_seconds", nil, 1},
		{"herald_api_decision_wait_seconds", []string{"result", "complete"}, 1},
		{"herald_api_decision_wait_seconds", []string{"result", "incomplete"}, 0},
	} {
		if got := m.Sum(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	for name, want := range map[string]float64{"herald_api_transaction_writes": 1, "herald_api_transaction_records": 2} {
		f := m[name]
		if f == nil || len(f.Metric) != 1 || f.Metric[0].Histogram.GetSampleCount() != 1 || f.Metric[0].Histogram.GetSampleSum() != want {
			t.Errorf("%s: %v, want one transaction of %v", name, f, want)
		}
	}
	// The API's consumers of the pipeline's topics report their lag on
	// the partitions they have read records from: the live decisions
	// consumer read the replies to the send (its instance's partition of
	// herald.replies); the read model reads its requests, and the replica
	// the route stage's... here, with no route stage, the devices written
	// above.
	decisions, requests, seen := p.cat.Name(topics.Replies), p.cat.Name(topics.Requests), p.cat.Name(topics.Devices)
	for deadline := time.Now().Add(patience); ; time.Sleep(50 * time.Millisecond) {
		m := scrapeRegistry(t, reg)
		live := m.Has("herald_consumer_lag_records", "consumer", "api-live-decisions", "topic", decisions)
		model := m.Has("herald_consumer_lag_records", "consumer", "api-read-model", "topic", requests)
		replica := m.Has("herald_consumer_lag_records", "consumer", "api-replica", "topic", seen)
		if live && model && replica {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lag of the live decisions consumer on %s: %v; of the read model on %s: %v; of the replica on %s: %v; want all three",
				decisions, live, requests, model, seen, replica)
		}
	}
}

// scrapeRegistry reads reg as Prometheus would.
func scrapeRegistry(t *testing.T, reg *metrics.Registry) testenv.Metrics {
	t.Helper()
	hs := httptest.NewServer(reg.Handler())
	defer hs.Close()
	return testenv.Scrape(t, hs.URL)
}

func TestConcurrentSendsAreEachWrittenWhole(t *testing.T) {
	p := startPipelineWith(t, false, nil)
	const sends, per = 24, 5
	var wg sync.WaitGroup
	errs := make(chan string, sends)
	for i := 0; i < sends; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			var rs []string
			for j := 0; j < per; j++ {
				rs = append(rs, fmt.Sprintf("%q", fmt.Sprintf("c%d-%d", i, j)))
			}
			body := fmt.Sprintf(`{"type":"t","recipients":[%s],"title":"x","body":"y"}`, strings.Join(rs, ","))
			if a := p.call(t, "POST", "/v1/notifications", keyA, body); a.status != 202 {
				errs <- fmt.Sprintf("send %d: %d %s", i, a.status, a.body)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	p.eventually(t, "every request is readable", func() bool {
		return len(testenv.ReadCommitted(t, p.brokers, p.cat.Name(topics.Requests))) >= sends*per
	})
	perCall := map[string]int{}
	for _, r := range testenv.ReadCommitted(t, p.brokers, p.cat.Name(topics.Requests)) {
		var rq schemas.Request
		if err := schemas.Decode(r.Value, &rq); err != nil {
			t.Fatal(err)
		}
		perCall[rq.RequestID]++
	}
	if len(perCall) != sends {
		t.Fatalf("%d calls in Kafka, want %d", len(perCall), sends)
	}
	for id, n := range perCall {
		if n != per {
			t.Fatalf("call %s has %d records, want %d", id, n, per)
		}
	}
}

// recipientsOf lists a send's recipients, sorted.
func recipientsOf(res sdk.SendResult) []string {
	var out []string
	for _, n := range res.Notifications {
		out = append(out, n.Recipient)
	}
	slices.Sort(out)
	return out
}

// TestGroupTargetsAreOneNotificationTheRouteStageFansOutOnTheRealBroker:
// a tag, segment or all target is accepted and decided by the dedupe stage
// as one notification addressed to the group, and the route stage, which
// holds the registry, writes one notification per member (processors/route
// group.go).
func TestGroupTargetsAreOneNotificationTheRouteStageFansOutOnTheRealBroker(t *testing.T) {
	p := startPipeline(t, func(c *Config) { c.WaitForRoute = true })
	p.startRoute(t, routestage.Policy{MaxFanOut: 3}, time.Second)
	devices := []struct{ key, path, body string }{
		{keyA, "/v1/users/t1/devices/phone", `{"platform":"ios","token":"a","tags":["vip","beta"]}`},
		{keyA, "/v1/users/t2/devices/phone", `{"platform":"android","token":"b","tags":["vip"]}`},
		{keyA, "/v1/users/t3/devices/phone", `{"platform":"ios","token":"c","tags":["vip"],"enabled":false}`},
		{keyA, "/v1/users/t4/devices/browser", `{"platform":"web","webPush":{"endpoint":"https://push.example/1","p256dh":"k","auth":"a"}}`},
		{keyB, "/v1/users/t9/devices/phone", `{"platform":"ios","token":"d","tags":["vip"]}`},
	}
	for _, d := range devices {
		if a := p.call(t, "PUT", d.path, d.key, d.body); a.status != 201 {
			t.Fatalf("register %s: %d %s", d.path, a.status, a.body)
		}
	}
	for _, sg := range []struct{ key, name, body string }{
		{keyA, "beta-testers", `{"members":["s1","s2"]}`},
		{keyA, "big", `{"members":["b1","b2","b3","b4"]}`},
		{keyA, "empty", `{"members":[]}`},
		{keyB, "beta-testers", `{"members":["x1"]}`},
	} {
		if a := p.call(t, "PUT", "/v1/segments/"+sg.name, sg.key, sg.body); a.status != 200 {
			t.Fatalf("put segment %s: %d %s", sg.name, a.status, a.body)
		}
	}
	// send answers a group send, waiting for the dedupe and route stages.
	send := func(t *testing.T, key, target, extra string) sdk.SendResult {
		t.Helper()
		a := p.call(t, "POST", "/v1/notifications", key, `{"type":"news","target":`+target+`,"title":"t","body":"b"`+extra+`}`, "Prefer", "wait=60")
		if a.status != 202 {
			t.Fatalf("send to %s: %d %s", target, a.status, a.body)
		}
		return decode[sdk.SendResult](t, a)
	}
	// members lists the recipients of the route decisions about the
	// members' notifications of a group notification, once there are want.
	members := func(t *testing.T, res sdk.SendResult, want []string) {
		t.Helper()
		group := res.Notifications[0]
		var got []string
		p.eventually(t, "the route stage decides the members' notifications", func() bool {
			got = nil
			for _, r := range testenv.ReadCommitted(t, p.brokers, p.cat.Name(topics.Decisions)) {
				var d schemas.Decision
				if schemas.Decode(r.Value, &d) != nil || d.Stage != "route" || d.RequestID != res.RequestID || d.NotificationID == group.ID {
					continue
				}
				if d.NotificationID != routestage.FanOutID(d.Tenant, "news", d.Recipient, group.ID) {
					t.Fatalf("member %s's notification %s is not the fan-out id", d.Recipient, d.NotificationID)
				}
				got = append(got, d.Recipient)
			}
			slices.Sort(got)
			return len(got) >= len(want)
		})
		if !slices.Equal(got, want) {
			t.Fatalf("the group reached %v, want %v", got, want)
		}
	}

	t.Run("a device's tags are stored and read back", func(t *testing.T) {
		d := decode[sdk.Device](t, p.call(t, "GET", "/v1/users/t1/devices/phone", keyA, ""))
		if !slices.Equal(d.Tags, []string{"vip", "beta"}) {
			t.Fatalf("tags %v", d.Tags)
		}
	})

	t.Run("all is one notification, fanned out by the route stage to every user with an enabled device", func(t *testing.T) {
		res := send(t, keyA, `{"kind":"all"}`, `,"dedupeKey":"news-1"`)
		want, _, _ := sdk.DeriveID("ta", "news", "@all", nil, "news-1", "")
		if len(res.Notifications) != 1 || res.Notifications[0].ID != want || res.Notifications[0].Recipient != "@all" || res.Notifications[0].Status != "accepted" {
			t.Fatalf("answer %+v, want the one notification %s addressed to @all, accepted", res.Notifications, want)
		}
		if len(res.Deliveries) != 0 || len(res.Skipped) != 0 {
			t.Fatalf("deliveries %+v, skipped %+v: the members' deliveries are not the group's", res.Deliveries, res.Skipped)
		}
		members(t, res, []string{"t1", "t2", "t4"})
		t.Run("its timeline names the members and their notifications", func(t *testing.T) {
			p.eventually(t, "the timeline holds the fan-out decision", func() bool {
				a := p.call(t, "GET", "/v1/notifications/"+want, keyA, "")
				return a.status == 200 && strings.Contains(string(a.body), "fanned out to 3 recipients: t1 ("+routestage.FanOutID("ta", "news", "t1", want)+")")
			})
		})
		t.Run("a repeat of the send is a duplicate of the group notification, not a second fan-out", func(t *testing.T) {
			again := send(t, keyA, `{"kind":"all"}`, `,"dedupeKey":"news-1"`)
			if again.Notifications[0].ID != want || again.Notifications[0].Status != "duplicate" {
				t.Fatalf("repeat answered %+v, want a duplicate of %s", again.Notifications, want)
			}
		})
	})

	t.Run("a tag reaches the users with an enabled device carrying it", func(t *testing.T) {
		members(t, send(t, keyA, `{"kind":"tag","tag":"vip"}`, ""), []string{"t1", "t2"})
		members(t, send(t, keyA, `{"kind":"tag","tag":"beta"}`, ""), []string{"t1"})
	})

	t.Run("a segment reaches its members", func(t *testing.T) {
		members(t, send(t, keyA, `{"kind":"segment","segment":"beta-testers"}`, ""), []string{"s1", "s2"})
	})

	t.Run("explain of a group names the members the route stage would reach", func(t *testing.T) {
		a := p.call(t, "POST", "/v1/explain", keyA, `{"type":"news","target":{"kind":"tag","tag":"vip"},"title":"t","body":"b"}`)
		if a.status != 200 {
			t.Fatalf("explain: %d %s", a.status, a.body)
		}
		e := decode[sdk.Explanation](t, a).Notifications
		if len(e) != 1 || e[0].Recipient != "@tag:vip" || e[0].RouteOutcome != "routed" ||
			!strings.Contains(e[0].RouteDetail, "fanned out to 2 recipients: t1 ("+routestage.FanOutID("ta", "news", "t1", e[0].ID)+") t2 (") {
			t.Fatalf("explained %+v", e)
		}
	})

	skipped := func(t *testing.T, target, reason string) {
		t.Helper()
		res := send(t, keyA, target, "")
		if res.Notifications[0].Status != "accepted" || len(res.Skipped) != 1 || res.Skipped[0].Reason != reason {
			t.Fatalf("send to %s answered %+v, skipped %+v; want accepted, then skipped by the route stage as %s", target, res.Notifications, res.Skipped, reason)
		}
	}
	t.Run("a group that reaches no one is accepted and skipped as no_target by the route stage", func(t *testing.T) {
		skipped(t, `{"kind":"tag","tag":"nobody"}`, "no_target")
		skipped(t, `{"kind":"segment","segment":"empty"}`, "no_target")
		skipped(t, `{"kind":"segment","segment":"no-such"}`, "no_target")
	})
	t.Run("a group larger than the route stage's fan-out limit is rejected whole", func(t *testing.T) {
		skipped(t, `{"kind":"segment","segment":"big"}`, "rejected")
	})

	t.Run("a tenant's groups reach its own users only", func(t *testing.T) {
		members(t, send(t, keyB, `{"kind":"segment","segment":"beta-testers"}`, ""), []string{"x1"})
		members(t, send(t, keyB, `{"kind":"all"}`, ""), []string{"t9"})
		members(t, send(t, keyB, `{"kind":"tag","tag":"vip"}`, ""), []string{"t9"})
		if a := p.call(t, "GET", "/v1/segments/beta-testers", keyB, ""); a.status != 200 || !slices.Equal(decode[sdk.Segment](t, a).Members, []string{"x1"}) {
			t.Fatalf("tenant b's segment: %d %s", a.status, a.body)
		}
	})

	t.Run("a deleted segment reaches no one", func(t *testing.T) {
		if a := p.call(t, "DELETE", "/v1/segments/beta-testers", keyA, ""); a.status != 204 {
			t.Fatalf("delete: %d %s", a.status, a.body)
		}
		if a := p.call(t, "GET", "/v1/segments/beta-testers", keyA, ""); a.status != 404 {
			t.Fatalf("after delete: %d, want 404", a.status)
		}
		skipped(t, `{"kind":"segment","segment":"beta-testers"}`, "no_target")
	})
}

func TestTheTimelineShowsAttemptsAndOutcomesOnTheRealBroker(t *testing.T) {
	p := startPipeline(t, nil)
	a := p.call(t, "POST", "/v1/notifications", keyA, `{"type":"order.shipped","recipientId":"tl1","title":"t","body":"b"}`, "Prefer", "wait=60")
	if a.status != 202 {
		t.Fatalf("send: %d %s", a.status, a.body)
	}
	id := decode[sdk.SendResult](t, a).Notifications[0].ID

	// No sink writes these yet: produce them as one would, transactionally
	// and keyed by delivery id. An aborted attempt must never show.
	cl := testenv.Client(t, p.brokers, kgo.TransactionalID("timeline-"+p.cat.Name("")), kgo.RecordPartitioner(p.cat.Partitioner()))
	now := time.Now().UnixMilli()
	rec := func(topic string, v schemas.Record, key string) *kgo.Record {
		b, err := schemas.Encode(v)
		if err != nil {
			t.Fatal(err)
		}
		return &kgo.Record{Topic: p.cat.Name(topic), Key: []byte(key), Value: b,
			Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(v.SchemaName())}}}
	}
	attempt := func(tenant string, n int, result, class, reason string, at int64) *kgo.Record {
		return rec(topics.Attempts, schemas.Attempt{AttemptID: fmt.Sprintf("del-1/%d", n), DeliveryID: "del-1", NotificationID: id, Tenant: tenant,
			Type: "order.shipped", Recipient: "tl1", DeviceID: "phone", Channel: "apns", Attempt: n, Result: result,
			Classification: class, ProviderReason: reason, At: at}, "del-1")
	}
	transact := func(commit kgo.TransactionEndTry, recs ...*kgo.Record) {
		t.Helper()
		ctx := context.Background()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := cl.EndTransaction(ctx, commit); err != nil {
			t.Fatal(err)
		}
	}
	transact(kgo.TryAbort, attempt("ta", 1, schemas.AttemptPermanent, "aborted", "never committed", now+1))
	transact(kgo.TryCommit,
		attempt("ta", 1, schemas.AttemptRetryable, "throttled", "TooManyRequests", now+2),
		attempt("ta", 2, schemas.AttemptSent, "", "", now+3),
		attempt("tb", 1, schemas.AttemptSent, "", "another tenant's", now+3),
		rec(topics.Outcomes, schemas.Outcome{DeliveryID: "del-1", NotificationID: id, Tenant: "ta", Type: "order.shipped", Recipient: "tl1",
			DeviceID: "phone", Channel: "apns", Status: schemas.OutcomeDelivered, Attempts: 2, At: now + 4}, "del-1"),
	)

	var got sdk.NotificationRecord
	p.eventually(t, "the timeline shows the outcome and both committed attempts", func() bool {
		var ok bool
		if got, ok = p.record(t, id, keyA); !ok {
			return false
		}
		attempts := slices.DeleteFunc(slices.Clone(got.Timeline), func(e sdk.TimelineEvent) bool { return e.Kind != sdk.EventAttempt })
		return len(attempts) >= 2 && slices.ContainsFunc(got.Timeline, func(e sdk.TimelineEvent) bool { return e.Kind == sdk.EventOutcome })
	})
	var kinds []string
	for _, e := range got.Timeline {
		kinds = append(kinds, e.Kind)
	}
	t.Run("the timeline lists request, decision, the committed attempts and the outcome in order", func(t *testing.T) {
		want := []string{"requested", "decision", "attempt", "attempt", "outcome"}
		if !slices.Equal(kinds, want) {
			t.Fatalf("timeline kinds %v, want %v: %+v", kinds, want, got.Timeline)
		}
		tl := got.Timeline
		first := sdk.TimelineEvent{At: atMs(now + 2), Kind: "attempt", DeliveryID: "del-1", Channel: "apns", DeviceID: "phone", Attempt: 1,
			Result: schemas.AttemptRetryable, Classification: "throttled", Reason: "TooManyRequests"}
		outcome := sdk.TimelineEvent{At: atMs(now + 4), Kind: "outcome", DeliveryID: "del-1", Channel: "apns", DeviceID: "phone",
			Status: schemas.OutcomeDelivered, Attempts: 2}
		if tl[2] != first || tl[3].Attempt != 2 || tl[3].Result != schemas.AttemptSent || tl[4] != outcome {
			t.Fatalf("timeline %+v", tl)
		}
	})
	t.Run("the raw answer names attempts and outcomes as the document says", func(t *testing.T) {
		raw := string(p.call(t, "GET", "/v1/notifications/"+id, keyA, "").body)
		for _, s := range []string{`"kind":"attempt"`, `"classification":"throttled"`, `"kind":"outcome"`, `"status":"delivered"`, `"deviceId":"phone"`} {
			if !strings.Contains(raw, s) {
				t.Fatalf("answer %s lacks %s", raw, s)
			}
		}
	})
	t.Run("another tenant's notification with the same id stays invisible", func(t *testing.T) {
		if s := p.call(t, "GET", "/v1/notifications/"+id, keyB, "").status; s != 404 {
			t.Fatalf("tenant b: %d, want 404", s)
		}
	})
}

func TestSendsAreWrittenInTheRequestFormatAndDecided(t *testing.T) {
	for _, format := range []schemas.Format{schemas.FormatBinary, schemas.FormatJSON} {
		t.Run("a send is written as "+format.RequestSchema()+", named in its header, and accepted", func(t *testing.T) {
			p := startPipeline(t, func(c *Config) { c.RequestFormat = format })
			a := p.call(t, "POST", "/v1/notifications", keyA, `{"type":"fmt","recipients":["f1"],"title":"t","body":"b","payload":{"n":1}}`, "Prefer", "wait=60")
			if a.status != 202 {
				t.Fatalf("%d %s", a.status, a.body)
			}
			res := decode[sdk.SendResult](t, a)
			if len(res.Notifications) != 1 || res.Notifications[0].Status != schemas.DecisionAccepted {
				t.Fatalf("send answered %s, want one accepted notification", a.body)
			}
			var written int
			for _, r := range testenv.ReadCommitted(t, p.brokers, p.cat.Name(topics.Requests)) {
				var rq schemas.Request
				if err := schemas.Decode(r.Value, &rq); err != nil {
					t.Fatal(err)
				}
				written++
				if rq.Schema != format.RequestSchema() || string(r.Headers[0].Value) != rq.Schema || string(rq.Payload) != `{"n":1}` {
					t.Fatalf("a request read as %s, header %s, payload %s; want %s", rq.Schema, r.Headers[0].Value, rq.Payload, format.RequestSchema())
				}
			}
			if written != 1 {
				t.Fatalf("%d requests written, want 1", written)
			}
		})
	}
}

// TestAnUnknownTimeZoneIsRefusedAndChangesNothingStored: a PUT whose time
// zone the route stage could not load is a 422 naming the field, and the
// preferences or device stored before it are read back unchanged.
func TestAnUnknownTimeZoneIsRefusedAndChangesNothingStored(t *testing.T) {
	p := startPipelineWith(t, false, nil)
	cases := []struct {
		name, path, good, bad, field, want string
	}{
		{"a user's quiet hours keep their zone", "/v1/users/tz-user/preferences",
			`{"quietHours":{"start":"02:00","end":"06:00","timeZone":"Asia/Tokyo"}}`,
			`{"quietHours":{"start":"02:00","end":"06:00","timeZone":"Asia/Tokio"}}`,
			"quietHours.timeZone", `"timeZone":"Asia/Tokyo"`},
		{"a device keeps its zone", "/v1/users/tz-user/devices/d1",
			`{"platform":"ios","token":"t","timeZone":"Europe/Paris"}`,
			`{"platform":"ios","token":"t2","timeZone":"Local"}`,
			"timeZone", `"timeZone":"Europe/Paris"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if a := p.call(t, "PUT", tc.path, keyA, tc.good); a.status/100 != 2 {
				t.Fatalf("PUT %s: %d %s", tc.good, a.status, a.body)
			}
			a := p.call(t, "PUT", tc.path, keyA, tc.bad)
			if a.status != 422 || a.header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("PUT %s: %d %s, want a 422 problem", tc.bad, a.status, a.body)
			}
			if pr := decode[sdk.Problem](t, a); !slices.ContainsFunc(pr.Errors, func(e sdk.FieldError) bool { return e.Field == tc.field }) {
				t.Fatalf("errors %+v do not name %q", pr.Errors, tc.field)
			}
			if a := p.call(t, "GET", tc.path, keyA, ""); a.status != 200 || !strings.Contains(string(a.body), tc.want) {
				t.Fatalf("GET after the refused PUT: %d %s, want %s", a.status, a.body, tc.want)
			}
		})
	}
}

// TestExplainNeverContradictsADecisionTheInstanceAnswered: a send answered
// accepted, then at once an explain of the same request to the same
// instance, a thousand times (eight callers at once): the explain always
// says the send would be replayed and deduplicated, never that it is new.
// The explain is answered by the dedupe stage after the send in the same
// partition, so it reads the send's write.
func TestExplainNeverContradictsADecisionTheInstanceAnswered(t *testing.T) {
	p := startPipeline(t, nil)
	const callers, each = 8, 125
	var wg sync.WaitGroup
	errs := make(chan string, callers)
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				body := fmt.Sprintf(`{"type":"ryw","recipientId":"u%d","title":"t","body":"b","dedupeKey":"k-%d-%d","idempotencyKey":"i-%d-%d"}`, c, c, i, c, i)
				a := p.call(t, "POST", "/v1/notifications", keyA, body, "Prefer", "wait=60")
				if a.status != 202 || decode[sdk.SendResult](t, a).Notifications[0].Status != schemas.DecisionAccepted {
					errs <- fmt.Sprintf("send %d/%d: %d %s", c, i, a.status, a.body)
					return
				}
				ex := decode[sdk.Explanation](t, p.call(t, "POST", "/v1/explain", keyA, body))
				if !ex.WouldReplay || ex.Notifications[0].Outcome != schemas.DecisionIdempotentReplay {
					errs <- fmt.Sprintf("send %d/%d answered accepted, then explain said %+v", c, i, ex)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
