package audit_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/heraldhq/herald/analytics/audit"
	"github.com/heraldhq/herald/internal/testenv"
)

// sent is one notification of the seeded audit: its request and one sent
// attempt to a device.
type sent struct {
	nid, idemKey, title, body, device string
	at                                time.Time
	channel                           string // apns when empty
}

// seed writes requests and sent attempts into a fresh, migrated database
// on the test ClickHouse server, as the audit writer would.
func seed(t *testing.T, rows []sent) (driver.Conn, string) {
	t.Helper()
	conn, _, db := testenv.AuditDB(t)
	ctx := context.Background()
	for i, r := range rows {
		ms := r.at.UnixMilli()
		if r.channel == "" {
			r.channel = "apns"
		}
		req := fmt.Sprintf("INSERT INTO `%s`.requests (kafka_topic, kafka_partition, kafka_offset, at, request_id, tenant, type, recipient, notification_id, id_source, idempotency_key, title, body, channels, source) "+
			"VALUES ('herald.requests', 0, %d, fromUnixTimestamp64Milli(%d), 'req%d', 'acme', 'payment.failed', 'u_twice', '%s', 'idempotency_key', '%s', '%s', '%s', ['apns'], 'api')",
			db, i, ms-2000, i, r.nid, r.idemKey, r.title, r.body)
		att := fmt.Sprintf("INSERT INTO `%s`.attempts (kafka_topic, kafka_partition, kafka_offset, at, attempt_id, delivery_id, notification_id, tenant, type, recipient, device_id, channel, attempt, result, collapse_id) "+
			"VALUES ('herald.attempts', 0, %d, fromUnixTimestamp64Milli(%d), 'att%d', 'del%d', '%s', 'acme', 'payment.failed', 'u_twice', '%s', '%s', 1, 'sent', '%s')",
			db, i, ms, i, i, r.nid, r.device, r.channel, r.nid)
		for _, q := range []string{req, att} {
			if err := conn.Exec(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
	return conn, db
}

func TestTheSameContentUnderTwoIdsIsNamedWithBothKeys(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)
	id := func(n int) string { return fmt.Sprintf("%032x", 0xa0+n) }
	rows := []sent{
		{id(1), "evt-a", "Payment failed", "Card declined", "dev-1", t0, ""},
		{id(2), "evt-b", "Payment failed", "Card declined", "dev-1", t0.Add(3 * time.Minute), ""}, // the producer's second send
		{id(3), "evt-c", "Payment failed", "Card expired", "dev-1", t0.Add(5 * time.Minute), ""},  // other body
		{id(4), "evt-d", "Payment failed", "Card declined", "dev-2", t0.Add(4 * time.Minute), ""}, // other device
		{id(5), "evt-e", "Payment failed", "Card declined", "dev-1", t0.Add(30 * time.Hour), ""},  // a day later
		{id(6), "evt-f", "Welcome", "Hello", "feed", t0.Add(40 * time.Hour), "feed"},
		{id(7), "evt-g", "Welcome", "Hello", "feed", t0.Add(40*time.Hour + time.Second), "feed"}, // the in-app feed, twice
	}
	conn, db := seed(t, rows)
	ctx := context.Background()
	tl, err := audit.Load(ctx, conn, db, audit.Selector{Recipient: "u_twice", Since: t0.Add(-time.Hour), Until: t0.Add(48 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	pairs := func(window time.Duration) []string {
		var out []string
		for _, sc := range tl.SameContent(window) {
			out = append(out, sc.First.NotificationID[30:]+"+"+sc.Second.NotificationID[30:]+" on "+sc.DeviceID)
		}
		return out
	}

	t.Run("within a day only the sends of the same content to the same device are named", func(t *testing.T) {
		if got, want := pairs(24*time.Hour), []string{"a1+a2 on dev-1", "a6+a7 on feed"}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("pairs %v, want %v", got, want)
		}
	})
	t.Run("a wider window also names the send a day later", func(t *testing.T) {
		if got, want := pairs(48*time.Hour), []string{"a1+a2 on dev-1", "a1+a5 on dev-1", "a2+a5 on dev-1", "a6+a7 on feed"}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("pairs %v, want %v", got, want)
		}
	})
	t.Run("a zero window names nothing", func(t *testing.T) {
		if got := pairs(0); len(got) != 0 {
			t.Fatalf("pairs %v, want none", got)
		}
	})

	var out strings.Builder
	if err := tl.Fprint(&out, audit.PrintOptions{Width: 100, SameContentWindow: 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	t.Logf("\n%s", text)
	t.Run("the warning names both ids, both idempotency keys and the producer", func(t *testing.T) {
		flat := strings.Join(strings.Fields(text), " ")
		for _, want := range []string{"WARNING: the same content (payment.failed", id(1) + " at", id(2) + " at",
			"(idempotency key evt-a; dedupe key none)", "(idempotency key evt-b; dedupe key none)",
			"The producer sent this twice under different keys."} {
			if !strings.Contains(flat, want) {
				t.Errorf("output lacks %q", want)
			}
		}
		if strings.Count(text, "WARNING:") != 2 || !strings.Contains(flat, `(payment.failed, title "Welcome", body "Hello") reached the in-app feed under`) {
			t.Errorf("%d warnings, want 2, the second for the in-app feed", strings.Count(text, "WARNING:"))
		}
	})
	t.Run("no line runs past the width", func(t *testing.T) {
		for _, l := range strings.Split(text, "\n") {
			if utf8.RuneCountInString(l) > 100 {
				t.Errorf("line of %d columns: %q", utf8.RuneCountInString(l), l)
			}
		}
	})
	t.Run("each notification's lines sit under its own heading", func(t *testing.T) {
		body, _, _ := strings.Cut(text, "\nDid anything reach")
		blocks := strings.Split(body, "\nNotification ")[1:]
		if len(blocks) != len(rows) {
			t.Fatalf("%d headings, want one per notification (%d)", len(blocks), len(rows))
		}
		mention := regexp.MustCompile(`notification ([0-9a-f]{32})`)
		for _, b := range blocks {
			heading := strings.TrimSuffix(strings.Fields(b)[0], ":")
			ms := mention.FindAllStringSubmatch(strings.Join(strings.Fields(b), " "), -1)
			if len(ms) == 0 {
				t.Errorf("notification %s's block names no notification:\n%s", heading, b)
			}
			for _, m := range ms {
				if m[1] != heading {
					t.Errorf("notification %s's block holds a line of %s", heading, m[1])
				}
			}
		}
	})
}

func TestAnIdTheAuditDoesNotHoldIsNotAnAnswer(t *testing.T) {
	conn, db := seed(t, nil)
	tl, err := audit.Load(context.Background(), conn, db, audit.Selector{NotificationID: "0123456789abcdef0123456789abcdef"})
	if err != nil {
		t.Fatal(err)
	}
	if !tl.Empty() || !strings.HasPrefix(tl.Nothing(), "herald holds nothing for this id") {
		t.Fatalf("empty %v, %q", tl.Empty(), tl.Nothing())
	}
}
