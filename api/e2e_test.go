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

	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/processors/dedupe"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sdk"
	"github.com/heraldhq/herald/topics"
)

// pipeline is the API and the dedupe stage running in-process against the
// real broker, on topics of their own.
type pipeline struct {
	brokers []string
	cat     *topics.Catalog
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
		err := dedupe.Run(ctx, dedupe.Options{Brokers: brokers, Catalog: cat, Group: "g-" + cat.Name(""), InstanceID: "i1",
			Policy: dedupe.DefaultPolicy(), Logger: quiet})
		if err != nil {
			t.Errorf("dedupe stage: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })

	cfg := Config{Brokers: brokers, Catalog: cat, Keys: testKeys(), IdempotencyWait: patience, Logger: quiet}
	if mod != nil {
		mod(&cfg)
	}
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
	p := &pipeline{brokers: brokers, cat: cat, srv: srv, url: hs.URL}
	p.eventually(t, "the replica is ready", func() bool { return srv.rep.ready.Load() })
	return p
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

	t.Run("explain answers from the seen-set without changing it", func(t *testing.T) {
		body := `{"type":"promo","recipientId":"e1","title":"t","body":"b","dedupeKey":"promo-7","idempotencyKey":"ex-1"}`
		ex := decode[sdk.Explanation](t, p.call(t, "POST", "/v1/explain", keyA, body))
		if ex.WouldDeduplicate || ex.WouldReplay || ex.Consistency != "eventual" {
			t.Fatalf("before any send: %+v", ex)
		}
		if a := p.call(t, "POST", "/v1/notifications", keyA, body); a.status != 202 {
			t.Fatalf("send: %d %s", a.status, a.body)
		}
		p.eventually(t, "explain sees the replay", func() bool {
			return decode[sdk.Explanation](t, p.call(t, "POST", "/v1/explain", keyA, body)).WouldReplay
		})
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
		p.eventually(t, "the owner reads its notification", func() bool {
			return p.call(t, "GET", "/v1/notifications/"+id, keyA, "").status == 200
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
	p.eventually(t, "the replica holds the first send", func() bool {
		return decode[sdk.Explanation](t, p.call(t, "POST", "/v1/explain", keyA, first)).WouldDeduplicate
	})
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
	p := startPipelineWith(t, false, func(c *Config) { c.IdempotencyWait = time.Second })
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
