package fallback_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/analytics/audit"
	"github.com/heraldhq/herald/analytics/auditwriter"
	"github.com/heraldhq/herald/analytics/migrations"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/internal/backoff"
	"github.com/heraldhq/herald/internal/metrics"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/processors/fallback"
	"github.com/heraldhq/herald/processors/route"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks"
	"github.com/heraldhq/herald/sinks/apns"
	apnsemu "github.com/heraldhq/herald/sinks/apns/emulator"
	"github.com/heraldhq/herald/sinks/email"
	smtpemu "github.com/heraldhq/herald/sinks/email/emulator"
	"github.com/heraldhq/herald/sinks/sinktest"
	"github.com/heraldhq/herald/topics"
)

// goRun runs f until the test ends.
func goRun(t *testing.T, name string, f func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := f(ctx); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
}

func produce(t testing.TB, brokers []string, cat *topics.Catalog, recs ...*kgo.Record) {
	t.Helper()
	cl := testenv.Client(t, brokers, kgo.RecordPartitioner(cat.Partitioner()))
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

func encoded(t testing.TB, topic, key string, v schemas.Record) *kgo.Record {
	t.Helper()
	b, err := schemas.Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	return &kgo.Record{Topic: topic, Key: []byte(key), Value: b, Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(v.SchemaName())}}}
}

// decisionsOf reads the fallback stage's committed decisions about nid.
func decisionsOf(t *testing.T, brokers []string, cat *topics.Catalog, nid string) []schemas.Decision {
	t.Helper()
	var out []schemas.Decision
	for _, r := range testenv.ReadCommitted(t, brokers, cat.Name(topics.Decisions)) {
		var d schemas.Decision
		if err := schemas.Decode(r.Value, &d); err != nil {
			t.Fatal(err)
		}
		if d.Stage == "fallback" && d.NotificationID == nid {
			out = append(out, d)
		}
	}
	return out
}

// commandsOf counts the committed delivery commands of nid on a channel.
func commandsOf(t *testing.T, brokers []string, cat *topics.Catalog, channel, nid string) []schemas.DeliveryCommand {
	t.Helper()
	var out []schemas.DeliveryCommand
	for _, r := range testenv.ReadCommitted(t, brokers, cat.Name(topics.Deliveries(channel))) {
		var c schemas.DeliveryCommand
		if err := schemas.Decode(r.Value, &c); err != nil {
			t.Fatal(err)
		}
		if c.NotificationID == nid {
			out = append(out, c)
		}
	}
	return out
}

func await(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// TestFallbackChainsOnTheRealBroker runs the route stage, the APNs and
// email sinks (against their emulators) and the fallback stage with its
// forwarders, in process, on the real broker:
//   - invoice.paid ("push > email if failed"): a user whose one iPhone's
//     token APNs answers 410 Unregistered, and who registered an address,
//     gets exactly one email, after the push's device_retired outcome;
//   - chat.message ("push > email after 1h unless displayed|opened"): a
//     displayed receipt within the hour cancels the email: the step is
//     decided fallback_cancelled, and no email command is written.
func TestFallbackChainsOnTheRealBroker(t *testing.T) {
	brokers := testenv.Kafka(t)
	cat := testenv.Catalog(t, brokers, 2)

	apnsEm, err := apnsemu.Start(apnsemu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { apnsEm.Close() })
	apnsEm.AddRule(apnsemu.Rule{Token: "dead-token", Status: 410, Reason: "Unregistered"})
	apnsP, err := apns.New(apns.Config{Host: apnsEm.URL(), RootCAs: apnsEm.RootCAs(), Topic: "com.example.app"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(apnsP.CloseIdleConnections)
	mailEm, err := smtpemu.Start(smtpemu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mailEm.Close() })
	host, port, _ := net.SplitHostPort(mailEm.Addr())
	cfg := email.Config{Host: host, TLS: email.TLSNone, From: "Herald <no-reply@herald.test>"}
	fmt.Sscan(port, &cfg.Port)
	mailP, err := email.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mailP.Close)

	chains := map[string]route.Chain{}
	for typ, text := range map[string]string{"invoice.paid": "push > email if failed", "chat.message": "push > email after 1h unless displayed|opened"} {
		c, err := route.ParseChain(text)
		if err != nil {
			t.Fatal(err)
		}
		chains[typ] = c
	}
	inst := stage.Instance{Brokers: brokers, InstanceID: "i1", BatchInterval: 20 * time.Millisecond, SessionTimeout: 6 * time.Second}

	devices := []schemas.Device{
		{Tenant: "acme", Recipient: "u_dead", DeviceID: "iphone", Platform: "ios", Token: "dead-token", Enabled: true},
		{Tenant: "acme", Recipient: "u_dead", DeviceID: "inbox", Platform: "email", Token: "dead@example.com", Enabled: true},
		{Tenant: "acme", Recipient: "u_seen", DeviceID: "iphone", Platform: "ios", Token: "live-token", Enabled: true},
		{Tenant: "acme", Recipient: "u_seen", DeviceID: "inbox", Platform: "email", Token: "seen@example.com", Enabled: true},
	}
	var recs []*kgo.Record
	for i := range devices {
		d := &devices[i]
		recs = append(recs, encoded(t, cat.Name(topics.Devices), schemas.DeviceKey(d.Tenant, d.Recipient, d.DeviceID), d))
	}
	produce(t, brokers, cat, recs...)

	rs, err := route.New(route.Options{Instance: inst, Catalog: cat, Policy: route.Policy{Chains: chains}})
	if err != nil {
		t.Fatal(err)
	}
	goRun(t, "route", rs.Run)
	fs, err := fallback.New(fallback.Options{Instance: inst, Catalog: cat, Types: map[string]bool{"invoice.paid": true, "chat.message": true}})
	if err != nil {
		t.Fatal(err)
	}
	goRun(t, "fallback", fs.Run)
	policy := sinks.Policy{MaxAttempts: 3, Backoff: backoff.Policy{Min: 50 * time.Millisecond, Max: 200 * time.Millisecond}}
	sinktest.Start(t, sinks.Options{Instance: stage.Instance{Brokers: brokers}, Channel: "apns", Provider: apnsP, Catalog: cat, Policy: policy})
	sinktest.Start(t, sinks.Options{Instance: stage.Instance{Brokers: brokers}, Channel: email.Channel, Provider: mailP, Catalog: cat, Policy: policy})
	await(t, "the route stage ready", rs.Ready)

	accepted := func(typ, recipient string) schemas.Accepted {
		n := schemas.Accepted{NotificationID: identity.DedupeID("acme", typ, recipient, "k1"), RequestID: identity.NewRandomID(),
			Tenant: "acme", Type: typ, Recipient: recipient, Title: "Invoice paid", Body: "thanks", AcceptedAt: time.Now().UnixMilli()}
		produce(t, brokers, cat, encoded(t, cat.Name(topics.Accepted), schemas.RecipientKey("acme", recipient), &n))
		return n
	}

	t.Run("a user with one unregistered iPhone and an address gets exactly one email", func(t *testing.T) {
		n := accepted("invoice.paid", "u_dead")
		await(t, "the fallback step's decision", func() bool { return len(decisionsOf(t, brokers, cat, n.NotificationID)) > 0 })
		mails := commandsOf(t, brokers, cat, email.Channel, n.NotificationID)
		if len(mails) != 1 || mails[0].Token != "dead@example.com" {
			t.Fatalf("email commands %+v, want one to dead@example.com", mails)
		}
		a := sinktest.AwaitOutcomes(t, brokers, cat, mails[0].DeliveryID)
		if o := a.Outcomes[mails[0].DeliveryID]; len(o) != 1 || o[0].Status != schemas.OutcomeDelivered {
			t.Fatalf("the email's outcomes %+v, want one delivered", o)
		}
		if box := mailEm.Mailbox("dead@example.com"); len(box) != 1 {
			t.Fatalf("the mailbox holds %d messages, want 1", len(box))
		}
		ds := decisionsOf(t, brokers, cat, n.NotificationID)
		if len(ds) != 1 || ds[0].Outcome != schemas.DecisionFallback || !strings.Contains(ds[0].Detail, "device_retired") ||
			len(ds[0].Deliveries) != 1 || ds[0].Deliveries[0].DeliveryID != mails[0].DeliveryID {
			t.Fatalf("fallback decisions %+v, want one fallback naming device_retired and the email", ds)
		}
	})

	t.Run("a displayed receipt within the delay cancels the email", func(t *testing.T) {
		n := accepted("chat.message", "u_seen")
		push := identity.DeliveryID(schemas.Occurrence(n.NotificationID, n.OccurrenceID), "iphone")
		a := sinktest.AwaitOutcomes(t, brokers, cat, push)
		if o := a.Outcomes[push]; len(o) != 1 || o[0].Status != schemas.OutcomeDelivered {
			t.Fatalf("the push's outcomes %+v, want one delivered", o)
		}
		// The receipt as the API writes it (POST /v1/receipts).
		rc := schemas.Receipt{ReceiptID: identity.ReceiptID(push, schemas.ReceiptDisplayed), Kind: schemas.ReceiptDisplayed, DeliveryID: push,
			NotificationID: n.NotificationID, Tenant: "acme", Type: n.Type, Recipient: "u_seen", DeviceID: "iphone", Channel: "webpush",
			At: time.Now().UnixMilli()}
		produce(t, brokers, cat, encoded(t, cat.Name(topics.Receipts), push, &rc))
		await(t, "the fallback step's decision", func() bool { return len(decisionsOf(t, brokers, cat, n.NotificationID)) > 0 })
		ds := decisionsOf(t, brokers, cat, n.NotificationID)
		if len(ds) != 1 || ds[0].Outcome != schemas.DecisionFallbackCancelled || !strings.Contains(ds[0].Detail, "displayed receipt of delivery "+push) {
			t.Fatalf("fallback decisions %+v, want one fallback_cancelled by the displayed receipt", ds)
		}
		if mails := commandsOf(t, brokers, cat, email.Channel, n.NotificationID); len(mails) != 0 {
			t.Fatalf("email commands %+v, want none", mails)
		}
	})

	t.Run("the auditors' timeline shows each step's decision with its reason", func(t *testing.T) {
		addr, db := testenv.ClickHouseDB(t)
		conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}, Auth: clickhouse.Auth{Database: db}})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx := context.Background()
		if _, err := migrations.Apply(ctx, conn, migrations.Options{Database: db}); err != nil {
			t.Fatal(err)
		}
		all := len(testenv.ReadCommitted(t, brokers, cat.Name(topics.Decisions)))
		goRun(t, "audit writer", func(ctx context.Context) error {
			return auditwriter.Run(ctx, auditwriter.Options{Brokers: brokers, Catalog: cat, ClickHouse: conn, Database: db})
		})
		await(t, "every decision in ClickHouse", func() bool {
			var n uint64
			return conn.QueryRow(ctx, "SELECT count() FROM decisions").Scan(&n) == nil && int(n) >= all
		})
		for nid, want := range map[string][]string{
			identity.DedupeID("acme", "invoice.paid", "u_dead", "k1"): {"route stage: routed", "fallback chain: push > email if failed",
				"fallback stage: fallback", "step 2 (email if failed) fired: every delivery of step 1 ended undelivered (device_retired)"},
			identity.DedupeID("acme", "chat.message", "u_seen", "k1"): {"fallback stage: fallback_cancelled",
				"step 2 (email after 1h0m0s unless displayed|opened) cancelled: displayed receipt of delivery"},
		} {
			tl, err := audit.Load(ctx, conn, db, audit.Selector{NotificationID: nid, Tenant: "acme"})
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			if err := tl.Print(&b); err != nil {
				t.Fatal(err)
			}
			for _, w := range want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("the timeline of %s lacks %q:\n%s", nid, w, b.String())
				}
			}
		}
	})

	t.Run("the replay of herald.fallback decides every step as the live stage did", func(t *testing.T) {
		rep, err := fallback.Replay(context.Background(), brokers, cat, "herald-fallback")
		if err != nil {
			t.Fatal(err)
		}
		if rep.Compared != 2 || len(rep.Differences) > 0 {
			t.Fatalf("compared %d, differences %q; want the two steps, none", rep.Compared, rep.Differences)
		}
	})
}

// TestAReceiptCommittedBeforeTheStepsTimeCancelsItHoweverLateItsForwarder
// runs the route stage and the fallback stage with its outcomes forwarder
// on the real broker, but not its receipts forwarder, for two users of
// "push > email after 8s unless displayed|opened". The first user's
// displayed receipt is committed to herald.receipts well before the
// email step's time; the receipts forwarder starts only after that time
// plus 3 s (an earlier herald fired steps on the wall clock minus a 1 s
// grace: it sent that email). Nothing is decided until the forwarder
// starts; then the first email is cancelled by the receipt, never sent,
// and the second, with no receipt, is sent once.
func TestAReceiptCommittedBeforeTheStepsTimeCancelsItHoweverLateItsForwarder(t *testing.T) {
	brokers := testenv.Kafka(t)
	cat := testenv.Catalog(t, brokers, 2)
	chain, err := route.ParseChain("push > email after 8s unless displayed|opened")
	if err != nil {
		t.Fatal(err)
	}
	var recs []*kgo.Record
	for _, u := range []string{"u_read", "u_unread"} {
		for _, d := range []schemas.Device{
			{Tenant: "acme", Recipient: u, DeviceID: "iphone", Platform: "ios", Token: "token-" + u, Enabled: true},
			{Tenant: "acme", Recipient: u, DeviceID: "inbox", Platform: "email", Token: u + "@example.com", Enabled: true},
		} {
			recs = append(recs, encoded(t, cat.Name(topics.Devices), schemas.DeviceKey(d.Tenant, d.Recipient, d.DeviceID), &d))
		}
	}
	produce(t, brokers, cat, recs...)
	inst := stage.Instance{Brokers: brokers, InstanceID: "i1", BatchInterval: 20 * time.Millisecond, SessionTimeout: 6 * time.Second}
	rs, err := route.New(route.Options{Instance: inst, Catalog: cat, Policy: route.Policy{Chains: map[string]route.Chain{"chat.message": chain}}})
	if err != nil {
		t.Fatal(err)
	}
	goRun(t, "route", rs.Run)
	reg := metrics.NewRegistry()
	finst := inst
	finst.Metrics = reg
	fs, err := fallback.New(fallback.Options{Instance: finst, Catalog: cat, Types: map[string]bool{"chat.message": true},
		MarkInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	goRun(t, "fallback", fs.Runner.Run)
	goRun(t, "fallback outcomes forwarder", fs.Outcomes.Run)
	await(t, "the route stage ready", rs.Ready)

	nids := map[string]string{}
	for _, u := range []string{"u_read", "u_unread"} {
		n := schemas.Accepted{NotificationID: identity.DedupeID("acme", "chat.message", u, "k1"), RequestID: identity.NewRandomID(),
			Tenant: "acme", Type: "chat.message", Recipient: u, Title: "New message", Body: "hi", AcceptedAt: time.Now().UnixMilli()}
		produce(t, brokers, cat, encoded(t, cat.Name(topics.Accepted), schemas.RecipientKey("acme", u), &n))
		nids[u] = n.NotificationID
	}
	plans := map[string]schemas.Fallback{}
	await(t, "both plans on herald.fallback", func() bool {
		for _, r := range testenv.ReadCommitted(t, brokers, cat.Name(topics.Fallback)) {
			var p schemas.Fallback
			if schemas.Decode(r.Value, &p) == nil && p.PlannedAt > 0 {
				plans[p.Recipient] = p
			}
		}
		return len(plans) == 2
	})
	stepAt := time.UnixMilli(max(plans["u_read"].PlannedAt, plans["u_unread"].PlannedAt) + 8000)

	// The receipt as the API writes it (POST /v1/receipts), committed
	// before the step's time.
	p := plans["u_read"]
	push := p.Steps[0].Deliveries[0]
	rc := schemas.Receipt{ReceiptID: identity.ReceiptID(push, schemas.ReceiptDisplayed), Kind: schemas.ReceiptDisplayed, DeliveryID: push,
		NotificationID: p.NotificationID, Tenant: "acme", Type: "chat.message", Recipient: "u_read", DeviceID: "iphone", Channel: "webpush",
		At: time.Now().UnixMilli()}
	produce(t, brokers, cat, encoded(t, cat.Name(topics.Receipts), push, &rc))
	if committed := time.Now(); !committed.Before(time.UnixMilli(p.PlannedAt + 8000)) {
		t.Fatalf("the receipt was committed at %v, not before the step's time %v: the machine is too slow for this test's 8 s", committed, stepAt)
	}

	time.Sleep(time.Until(stepAt.Add(3 * time.Second)))
	lag := func(p int) float64 {
		return float64(reg.Gauge("herald_fallback_watermark_lag_seconds", "", "partition", fmt.Sprint(p)).Value())
	}
	t.Run("with the receipts forwarder down, no step fires past its time", func(t *testing.T) {
		for u, nid := range nids {
			if ds := decisionsOf(t, brokers, cat, nid); len(ds) != 0 {
				t.Fatalf("%s: decisions %+v before the receipts forwarder ran; want none", u, ds)
			}
		}
		// Never heard of: the clock is 0, the lag the wall clock itself.
		for p := range 2 {
			if l := lag(p); l < float64(stepAt.Unix()) {
				t.Fatalf("watermark lag of partition %d: %v s, want the whole wall clock (no receipts watermark yet)", p, l)
			}
		}
	})

	goRun(t, "fallback receipts forwarder", fs.Receipts.Run)
	await(t, "both steps decided", func() bool {
		return len(decisionsOf(t, brokers, cat, nids["u_read"])) > 0 && len(decisionsOf(t, brokers, cat, nids["u_unread"])) > 0
	})
	t.Run("the receipt committed before the step's time cancels it, however late its forwarder", func(t *testing.T) {
		ds := decisionsOf(t, brokers, cat, nids["u_read"])
		if len(ds) != 1 || ds[0].Outcome != schemas.DecisionFallbackCancelled || !strings.Contains(ds[0].Detail, "displayed receipt of delivery "+push) {
			t.Fatalf("decisions %+v, want one fallback_cancelled by the displayed receipt", ds)
		}
		if mails := commandsOf(t, brokers, cat, email.Channel, nids["u_read"]); len(mails) != 0 {
			t.Fatalf("email commands %+v, want none", mails)
		}
	})
	t.Run("a step with no receipt fires once the forwarder has caught up", func(t *testing.T) {
		ds := decisionsOf(t, brokers, cat, nids["u_unread"])
		if len(ds) != 1 || ds[0].Outcome != schemas.DecisionFallback || ds[0].At != plans["u_unread"].PlannedAt+8000 {
			t.Fatalf("decisions %+v, want one fallback at the step's time", ds)
		}
		if mails := commandsOf(t, brokers, cat, email.Channel, nids["u_unread"]); len(mails) != 1 || mails[0].Token != "u_unread@example.com" {
			t.Fatalf("email commands %+v, want one to u_unread@example.com", mails)
		}
	})
	t.Run("the watermark lag shows the forwarders caught up", func(t *testing.T) {
		await(t, "a watermark lag below the time since the step", func() bool {
			return lag(0) < time.Since(stepAt).Seconds() && lag(1) < time.Since(stepAt).Seconds()
		})
	})
	t.Run("the replay decides both steps as the live stage did", func(t *testing.T) {
		rep, err := fallback.Replay(context.Background(), brokers, cat, "herald-fallback")
		if err != nil {
			t.Fatal(err)
		}
		if rep.Compared != 2 || len(rep.Differences) > 0 {
			t.Fatalf("compared %d, differences %q; want the two steps, none", rep.Compared, rep.Differences)
		}
	})
	t.Run("a replay naming a group that never ran reports every step it decides as pending, not an error", func(t *testing.T) {
		rep, err := fallback.Replay(context.Background(), brokers, cat, "herald-fallback-never-ran")
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Differences) > 0 {
			t.Fatalf("differences %q; want none", rep.Differences)
		}
	})
}
