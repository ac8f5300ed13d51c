package api

import (
	"fmt"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/heraldhq/herald/analytics/dashboard"
	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks"
	"github.com/heraldhq/herald/sinks/feed"
	"github.com/heraldhq/herald/sinks/sinktest"
	"github.com/heraldhq/herald/topics"
)

// TestTheFeedOnTheRealBroker runs the feed sink and the API on the real
// broker: five notifications reach tenant ta's user u1's feed (one of them
// twice, under two deliveries), and one reaches tenant tb's u1. The API
// pages them newest first with the unread count, marks one and then all
// read, keeps each tenant to its own feed, and a restarted API serves the
// same items and read marks from herald.feed.
//
// It runs twice: with the feed read from the API's replica of herald.feed
// (no ClickHouse), and from the audit's feed_items table (ClickHouse, the
// audit writer copying herald.feed), where the instance holds no item.
func TestTheFeedOnTheRealBroker(t *testing.T) {
	t.Run("read from the replica of herald.feed", func(t *testing.T) { testFeed(t, false) })
	t.Run("read from the audit, one recipient's rows at a time", func(t *testing.T) { testFeed(t, true) })
}

func testFeed(t *testing.T, fromAudit bool) {
	var mod func(*Config)
	var conn driver.Conn
	var db string
	if fromAudit {
		conn, _, db = testenv.AuditDB(t)
		mod = func(c *Config) { c.Dashboard = &dashboard.Source{Conn: conn, Database: db} }
	}
	p := startPipelineWith(t, false, mod)
	if fromAudit {
		p.startAuditWriter(t, conn, db)
	}
	sinktest.Start(t, sinks.Options{Instance: stage.Instance{Brokers: p.brokers}, Channel: feed.Channel, Provider: feed.New(p.cat), Catalog: p.cat})
	base := time.Now().Add(-time.Hour).UnixMilli()
	var cmds []*schemas.DeliveryCommand
	var ids []string // ta's, oldest first
	for i := range 5 {
		nid := identity.DedupeID("ta", "t", "u1", fmt.Sprint("n", i))
		ids = append(ids, nid)
		cmds = append(cmds, &schemas.DeliveryCommand{DeliveryID: identity.DeliveryID(nid, "feed"), NotificationID: nid, Tenant: "ta",
			Type: "t", Recipient: "u1", DeviceID: "feed", Channel: feed.Channel, CollapseID: nid, Title: fmt.Sprint("title ", i), Body: "b",
			CreatedAt: base + int64(i)*1000})
	}
	again := *cmds[2] // the same notification under a second delivery: still one item
	again.DeliveryID, again.DeviceID = identity.DeliveryID(ids[2], "feed-2"), "feed-2"
	other := *cmds[0]
	other.Tenant, other.NotificationID = "tb", identity.DedupeID("tb", "t", "u1", "n0")
	other.DeliveryID = identity.DeliveryID(other.NotificationID, "feed")
	cmds = append(cmds, &again, &other)
	sinktest.Produce(t, p.brokers, p.cat, cmds...)

	get := func(key, query string) FeedPage {
		t.Helper()
		a := p.call(t, "GET", "/v1/recipients/u1/feed"+query, key, "")
		if a.status != 200 {
			t.Fatalf("GET feed%s: %d %s", query, a.status, a.body)
		}
		return decode[FeedPage](t, a)
	}
	// The two tenants' items are on different partitions of herald.feed,
	// which the sink and the API may reach at different times: wait for
	// both.
	p.eventually(t, "ta's feed holds the five items and tb's its one", func() bool {
		return len(get(keyA, "?limit=100").Items) == 5 && len(get(keyB, "").Items) == 1
	})

	t.Run("the feed pages newest first with the unread count", func(t *testing.T) {
		first := get(keyA, "?limit=2")
		if first.UnreadCount != 5 || len(first.Items) != 2 || first.Items[0].NotificationID != ids[4] || first.Items[1].NotificationID != ids[3] || first.NextCursor == "" {
			t.Fatalf("first page %+v", first)
		}
		second := get(keyA, "?limit=2&cursor="+url.QueryEscape(first.NextCursor))
		third := get(keyA, "?limit=2&cursor="+url.QueryEscape(second.NextCursor))
		if len(second.Items) != 2 || second.Items[0].NotificationID != ids[2] || len(third.Items) != 1 || third.Items[0].NotificationID != ids[0] || third.NextCursor != "" {
			t.Fatalf("second page %+v, third %+v", second, third)
		}
	})
	t.Run("another tenant sees only its own feed", func(t *testing.T) {
		pg := get(keyB, "")
		if len(pg.Items) != 1 || pg.Items[0].NotificationID != other.NotificationID || pg.UnreadCount != 1 {
			t.Fatalf("tenant tb's feed %+v", pg)
		}
		if a := p.call(t, "POST", "/v1/recipients/u1/feed/"+ids[0]+"/read", keyB, ""); a.status != 404 {
			t.Fatalf("tenant tb marking tenant ta's item: %d, want 404", a.status)
		}
	})
	t.Run("marking one item read is idempotent and lowers the unread count", func(t *testing.T) {
		for range 2 {
			if a := p.call(t, "POST", "/v1/recipients/u1/feed/"+ids[1]+"/read", keyA, ""); a.status != 204 {
				t.Fatalf("mark read: %d %s", a.status, a.body)
			}
		}
		pg := get(keyA, "?limit=100")
		if pg.UnreadCount != 4 || !pg.Items[3].Read || pg.Items[3].ReadAt == 0 || pg.Items[0].Read {
			t.Fatalf("after one read %+v", pg)
		}
		if a := p.call(t, "POST", "/v1/recipients/u1/feed/nope/read", keyA, ""); a.status != 404 {
			t.Fatalf("marking an unknown item: %d, want 404", a.status)
		}
	})
	t.Run("read-all marks the rest and survives a restart", func(t *testing.T) {
		a := p.call(t, "POST", "/v1/recipients/u1/feed/read-all", keyA, "")
		if a.status != 200 || decode[map[string]int](t, a)["marked"] != 4 {
			t.Fatalf("read-all: %d %s, want 4 marked", a.status, a.body)
		}
		p.restart(t, nil)
		p.eventually(t, "the restarted replica is ready", func() bool { return p.srv.rep.ready.Load() })
		if fromAudit {
			// The restarted instance has no marks of its own: the audit's.
			p.eventually(t, "the audit holds the read marks", func() bool { return get(keyA, "?limit=100").UnreadCount == 0 })
		}
		pg := get(keyA, "?limit=100")
		if len(pg.Items) != 5 || pg.UnreadCount != 0 {
			t.Fatalf("after a restart %+v, want five read items", pg)
		}
		if tb := get(keyB, ""); tb.UnreadCount != 1 {
			t.Fatalf("tenant tb's unread count %d after ta's read-all, want 1", tb.UnreadCount)
		}
	})
	if fromAudit {
		t.Run("an instance reading the feed from the audit holds no feed item", func(t *testing.T) {
			p.srv.rep.mu.RLock()
			defer p.srv.rep.mu.RUnlock()
			if len(p.srv.rep.feed) != 0 || slices.Contains(p.srv.rep.topics(), p.cat.Name(topics.Feed)) {
				t.Fatalf("the replica reads %v and holds the feeds of %d recipients", p.srv.rep.topics(), len(p.srv.rep.feed))
			}
		})
	}
}

func TestAFeedCursorOrLimitThatIsNotOneTheAPIGivesIsRefused(t *testing.T) {
	cases := []struct{ name, cursor string }{
		{"not base64url", "%%%"},
		{"no separator", "MTIz"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, ok := parseFeedCursor(tc.cursor); ok {
				t.Fatalf("cursor %q accepted", tc.cursor)
			}
		})
	}
	it := schemas.FeedItem{CreatedAt: 1764547200000, NotificationID: "abc"}
	if at, id, ok := parseFeedCursor(feedCursor(it)); !ok || at != it.CreatedAt || id != it.NotificationID {
		t.Fatalf("a cursor does not round-trip: %d %q %v", at, id, ok)
	}
}

func TestAnInstanceKeepsOnlyItsNewestReadMarks(t *testing.T) {
	m := readMarks{max: 2}
	m.put("a", 1)
	m.put("b", 2)
	m.put("a", 3) // again: still one entry
	m.put("c", 4)
	for _, c := range []struct {
		key  string
		at   int64
		kept bool
	}{{"a", 0, false}, {"b", 2, true}, {"c", 4, true}} {
		if at, ok := m.get(c.key); ok != c.kept || at != c.at {
			t.Fatalf("mark %s: %d, %v; want %d, %v (the oldest goes first)", c.key, at, ok, c.at, c.kept)
		}
	}
}
