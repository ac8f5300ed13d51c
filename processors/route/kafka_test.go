package route

import (
	"context"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/analytics/audit"
	"github.com/heraldhq/herald/analytics/auditwriter"
	"github.com/heraldhq/herald/analytics/migrations"
	"github.com/heraldhq/herald/analytics/queries"
	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/processors/dedupe"
	"github.com/heraldhq/herald/schemas"
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

// produce writes records with the catalog's partitioner.
func produce(t testing.TB, brokers []string, cat *topics.Catalog, recs []*kgo.Record) {
	t.Helper()
	cl := testenv.Client(t, brokers, kgo.RecordPartitioner(cat.Partitioner()), kgo.ProducerLinger(5*time.Millisecond))
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

func encoded(t testing.TB, topic, key string, v schemas.Record, at time.Time) *kgo.Record {
	t.Helper()
	b, err := schemas.Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	return &kgo.Record{Topic: topic, Key: []byte(key), Value: b, Timestamp: at}
}

// routeOutput is what the route stage has committed so far.
type routeOutput struct {
	decisions []schemas.Decision // stage route only
	commands  []schemas.DeliveryCommand
}

func readRouteOutput(t *testing.T, brokers []string, cat *topics.Catalog) routeOutput {
	t.Helper()
	var o routeOutput
	for _, r := range testenv.ReadCommitted(t, brokers, cat.Name(topics.Decisions)) {
		var d schemas.Decision
		if err := schemas.Decode(r.Value, &d); err != nil {
			t.Fatal(err)
		}
		if d.Stage == "route" {
			o.decisions = append(o.decisions, d)
		}
	}
	for _, ch := range topics.Channels {
		for _, r := range testenv.ReadCommitted(t, brokers, cat.Name(topics.Deliveries(ch))) {
			var c schemas.DeliveryCommand
			if err := schemas.Decode(r.Value, &c); err != nil {
				t.Fatal(err)
			}
			o.commands = append(o.commands, c)
		}
	}
	return o
}

// waitRoute polls until the route stage has committed n decisions, failing
// if more appear or time runs out.
func waitRoute(t *testing.T, brokers []string, cat *topics.Catalog, n int, limit time.Duration) routeOutput {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		o := readRouteOutput(t, brokers, cat)
		if len(o.decisions) >= n || time.Now().After(deadline) {
			if len(o.decisions) != n {
				t.Fatalf("%d route decisions, want %d", len(o.decisions), n)
			}
			return o
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func request(tenant, typ, recipient, dedupeKey string) schemas.Request {
	return schemas.Request{RequestID: identity.NewRandomID(), Tenant: tenant, Type: typ, Recipient: recipient,
		NotificationID: identity.DedupeID(tenant, typ, recipient, dedupeKey), IDSource: "dedupe_key", DedupeKey: dedupeKey,
		Title: typ + " " + dedupeKey, Body: "b", Source: "sdk"}
}

var seedPolicy = Policy{Rates: map[string]RateLimit{"rated": {Max: 2, WindowMs: 3600_000}}, Digests: map[string]Digest{"digest": {WindowMs: 20_000}}}

func TestSeedInteractionsThroughDedupeAndRouteOnTheRealBroker(t *testing.T) {
	brokers := testenv.Kafka(t)
	cat := testenv.Catalog(t, brokers, 3)
	const tenant = "seeds"
	// Nights in UTC, two days ago: every timer is already due on the wall
	// clock, so deferred pushes are released as soon as they are deferred
	// (with NotBefore at the window's end).
	day := time.Now().UTC().Truncate(24 * time.Hour).Add(-48 * time.Hour)
	quiet := &schemas.QuietHours{Start: "22:00", End: "07:00", TimeZone: "UTC"}
	device := func(user, id, platform string) *kgo.Record {
		return encoded(t, cat.Name(topics.Devices), schemas.DeviceKey(tenant, user, id),
			&schemas.Device{Tenant: tenant, Recipient: user, DeviceID: id, Platform: platform, Token: "tok-" + id, Enabled: true}, day)
	}
	prefs := func(user string, p schemas.Preferences) *kgo.Record {
		p.Tenant, p.Recipient = tenant, user
		return encoded(t, cat.Name(topics.Preferences), schemas.RecipientKey(tenant, user), &p, day)
	}
	produce(t, brokers, cat, []*kgo.Record{
		device("sleeper", "s-ios", "ios"),
		prefs("sleeper", schemas.Preferences{QuietHours: quiet}),
		device("limited", "l-ios", "ios"),
		device("digester", "d-web", "web"),
		device("picky", "p-ios", "ios"), device("picky", "p-pixel", "android"),
		prefs("picky", schemas.Preferences{Channels: map[string]bool{"apns": false}}),
		device("fan", "f-ios-1", "ios"), device("fan", "f-ios-2", "ios"), device("fan", "f-pixel", "android"), device("fan", "f-chrome", "web"),
	})

	goRun(t, "dedupe", func(ctx context.Context) error {
		return dedupe.Run(ctx, dedupe.Options{
			Instance: stage.Instance{Brokers: brokers, Group: "g-dedupe-" + cat.Name(""), InstanceID: "d1"},
			Catalog:  cat,
			Policy:   dedupe.Policy{DefaultWindowMs: 3600_000, IdempotencyTTLMs: 3600_000},
		})
	})
	goRun(t, "route", func(ctx context.Context) error {
		return Run(ctx, Options{
			Instance: stage.Instance{Brokers: brokers, Group: "g-route-" + cat.Name(""), InstanceID: "r1"},
			Catalog:  cat,
			Policy:   seedPolicy,
		})
	})

	now := time.Now()
	at := func(h, m int) time.Time { return day.Add(time.Duration(h)*time.Hour + time.Duration(m)*time.Minute) }
	type sendAt struct {
		r  schemas.Request
		at time.Time
	}
	sends := []sendAt{
		// Quiet hours: deferred, the repeat is a duplicate, after the dedupe
		// window the same key is deferred afresh.
		{request(tenant, "news", "sleeper", "k"), at(23, 0)},
		{request(tenant, "news", "sleeper", "k"), at(23, 10)},
		{request(tenant, "news", "sleeper", "k"), at(24, 30)},
		// Duplicates never count against the limit of two an hour.
		{request(tenant, "rated", "limited", "a"), at(12, 0)},
		{request(tenant, "rated", "limited", "a"), at(12, 1)},
		{request(tenant, "rated", "limited", "a"), at(12, 2)},
		{request(tenant, "rated", "limited", "b"), at(12, 3)},
		{request(tenant, "rated", "limited", "c"), at(12, 4)},
		// Dedupe fires before digest buffering. Stamped now: a digest
		// window fires on the wall clock, and records older than it would
		// each find their window already over (see the package doc).
		{request(tenant, "digest", "digester", "a"), now},
		{request(tenant, "digest", "digester", "a"), now.Add(time.Millisecond)},
		{request(tenant, "digest", "digester", "b"), now.Add(2 * time.Millisecond)},
		// An opted-out channel is never used.
		{request(tenant, "news", "picky", "a"), at(12, 0)},
		// Fan-out.
		{request(tenant, "news", "fan", "a"), at(12, 0)},
	}
	var recs []*kgo.Record
	for _, s := range sends {
		recs = append(recs, encoded(t, cat.Name(topics.Requests), s.r.NotificationID, &s.r, s.at))
	}
	produce(t, brokers, cat, recs)

	// sleeper: deferred, released, deferred, released; limited: routed ×2,
	// rate_limited; digester: digested ×2, the digest routed; picky:
	// opted_out:apns, routed; fan: routed.
	out := waitRoute(t, brokers, cat, 4+3+3+2+1, 2*time.Minute)
	byUser := map[string][]string{}
	for _, d := range out.decisions {
		o := d.Outcome
		if d.Channel != "" {
			o += ":" + d.Channel
		}
		byUser[d.Recipient] = append(byUser[d.Recipient], o)
	}
	cmds := map[string][]string{}
	for _, c := range out.commands {
		cmds[c.Recipient] = append(cmds[c.Recipient], c.Channel+"/"+c.DeviceID)
	}
	want := []struct {
		name, user, decisions, commands string
	}{
		{"the first send in quiet hours is deferred and delivered at the window's end; the repeat is skipped; after the window it is deferred afresh",
			"sleeper", "deferred deferred routed routed", "apns/s-ios apns/s-ios feed/feed feed/feed"},
		{"a deduplicated send never counts against a rate limit", "limited", "rate_limited routed routed",
			"apns/l-ios apns/l-ios feed/feed feed/feed"},
		{"dedupe fires before digest buffering: one digest of two", "digester", "digested digested routed", "feed/feed webpush/d-web"},
		{"an opted-out channel is never used", "picky", "opted_out:apns routed", "fcm/p-pixel feed/feed"},
		{"two iOS, one Android and one browser get exactly four pushes and one feed item", "fan", "routed",
			"apns/f-ios-1 apns/f-ios-2 fcm/f-pixel feed/feed webpush/f-chrome"},
	}
	for _, w := range want {
		t.Run(w.name, func(t *testing.T) {
			sort.Strings(byUser[w.user])
			sort.Strings(cmds[w.user])
			if got := strings.Join(byUser[w.user], " "); got != w.decisions {
				t.Errorf("decisions %q, want %q", got, w.decisions)
			}
			if got := strings.Join(cmds[w.user], " "); got != w.commands {
				t.Errorf("commands %q, want %q", got, w.commands)
			}
		})
	}
	for _, c := range out.commands {
		if c.Recipient == "sleeper" && c.Channel == "apns" && c.NotBefore != at(31, 0).UnixMilli() {
			t.Errorf("deferred push not before %s, want the window's end %s", fmtTime(c.NotBefore), at(31, 0).Format(time.RFC3339))
		}
	}
	t.Run("a replay of history reproduces every route decision", func(t *testing.T) {
		rep, err := Replay(context.Background(), brokers, cat, seedPolicy)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Differences) != 0 || rep.Compared != len(out.decisions) || rep.Notifications != 9 {
			t.Fatalf("replayed %d notifications, compared %d of %d decisions, differences %q", rep.Notifications, rep.Compared, len(out.decisions), rep.Differences)
		}
	})
	t.Run("a replay with another rate limit shows the decisions it changes", func(t *testing.T) {
		other := seedPolicy
		other.Rates = map[string]RateLimit{"rated": {Max: 1, WindowMs: 3600_000}}
		rep, err := Replay(context.Background(), brokers, cat, other)
		if err != nil {
			t.Fatal(err)
		}
		// The second is limited instead of routed; the third stays limited,
		// with another count in its detail.
		if len(rep.Differences) != 2 || !strings.Contains(rep.Differences[0], "live routed") || !strings.Contains(rep.Differences[0], "replay rate_limited") {
			t.Fatalf("differences %q, want the second rated notification limited", rep.Differences)
		}
	})
	t.Run("the audit record in ClickHouse holds the route reasons, in the timeline and the missing-notification report", func(t *testing.T) {
		auditRouteReasons(t, brokers, cat, tenant, sends[0].r.NotificationID)
	})
	for _, c := range out.commands {
		if c.Recipient == "digester" {
			if !strings.Contains(string(c.Payload), `"count":2`) {
				t.Errorf("digest payload %s, want a count of 2", c.Payload)
			}
		}
	}
}

// auditRouteReasons copies the topics into a ClickHouse database with the
// audit writer and reads the route stage's decisions back through the
// auditors' timeline and the missing-notification query.
func auditRouteReasons(t *testing.T, brokers []string, cat *topics.Catalog, tenant, sleeperID string) {
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
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		var n uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM decisions").Scan(&n); err == nil && int(n) >= all {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ClickHouse holds fewer than the %d decisions", all)
		}
	}

	tl, err := audit.Load(ctx, conn, db, audit.Selector{NotificationID: sleeperID, Tenant: tenant})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := tl.Print(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"route stage: deferred", "quiet hours until", "route stage: routed", "released at the end of quiet hours"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("timeline lacks %q:\n%s", want, b.String())
		}
	}

	q, err := queries.Get("suppressed_for_recipient")
	if err != nil {
		t.Fatal(err)
	}
	reasons := func(user string) string {
		var rows []struct {
			At                time.Time `ch:"at"`
			Kind              string    `ch:"kind"`
			NotificationID    string    `ch:"notification_id"`
			RequestID         string    `ch:"request_id"`
			DeliveryID        string    `ch:"delivery_id"`
			Channel           string    `ch:"channel"`
			Reason            string    `ch:"reason"`
			Detail            string    `ch:"detail"`
			OriginalRequestID string    `ch:"original_request_id"`
		}
		if err := q.Select(ctx, conn, &rows, map[string]string{"tenant": tenant, "recipient": user,
			"since": queries.Time(time.Now().Add(-72 * time.Hour)), "until": queries.Time(time.Now().Add(time.Hour))}); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range rows {
			out = append(out, r.Reason+chanOf(schemas.Decision{Channel: r.Channel}))
		}
		sort.Strings(out)
		return strings.Join(out, " ")
	}
	for user, want := range map[string]string{
		"sleeper":  "deferred deferred duplicate",
		"limited":  "duplicate duplicate rate_limited",
		"digester": "digested digested duplicate",
		"picky":    "opted_out:apns",
		"fan":      "",
	} {
		if got := reasons(user); got != want {
			t.Errorf("missing-notification report for %s: %q, want %q", user, got, want)
		}
	}
}
