package api

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sdk"
)

// The in-app feed: herald.feed holds one item per notification and
// recipient, written by the feed sink; the API serves a recipient's items
// newest first and writes read marks to the same key.
//
// Where the items are read. With the audit record configured
// (Config.Dashboard: ClickHouse, herald dev and production), from the
// audit's feed_items table, one recipient's rows at a time (the audit
// writer copies herald.feed there; see its migration), so that an
// instance holds no copy of herald.feed and its memory does not grow with
// the pipeline: a page reads the recipient's newest feedReadLimit items of
// the feed's retention. The audit trails herald.feed by the audit writer's
// batch (about a second): a delivered item appears then. The read marks an
// instance writes are kept in a bounded cache (readMarks, MaxTracked of
// them) and laid over what the audit answers until it has them, so a
// caller reads its own marks on the instance that made them. Without the
// audit (a deployment with no ClickHouse, most tests), the replica reads
// herald.feed whole, as before, and holds every item of the retention.

// feedReadLimit bounds the items one feed read takes from the audit: the
// recipient's newest, of which pages and the unread count are made.
const feedReadLimit = 10_000

// readMarks is the bounded cache of the read marks an instance wrote,
// FeedKey → read time, the oldest dropped first.
type readMarks struct {
	mu    sync.Mutex
	max   int
	at    map[string]int64
	order []string
}

func (m *readMarks) put(key string, at int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.at == nil {
		m.at = map[string]int64{}
	}
	if _, ok := m.at[key]; !ok {
		m.order = append(m.order, key)
	}
	m.at[key] = at
	for len(m.order) > max(m.max, 1) {
		delete(m.at, m.order[0])
		m.order = m.order[1:]
	}
}

func (m *readMarks) get(key string) (int64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	at, ok := m.at[key]
	return at, ok
}

// feedItems returns a recipient's items created at or after since, newest
// first (ties by notification id, descending): from the audit when it is
// configured, else from the replica.
func (s *Server) feedItems(ctx context.Context, tenant, recipient string, since int64) ([]schemas.FeedItem, error) {
	if !s.cfg.historyFromAudit() {
		return s.rep.feedOf(tenant, recipient, since), nil
	}
	// Each item's latest version (the highest offset: all of an item's
	// versions are on one partition of herald.feed), then the retention.
	q := "SELECT notification_id, type, title, body, payload, toUnixTimestamp64Milli(at), toUnixTimestamp64Milli(delivered_at), " +
		"toUnixTimestamp64Milli(read_at) FROM (SELECT * FROM `" + s.cfg.Dashboard.Database + "`.feed_items " +
		"WHERE tenant = ? AND recipient = ? AND decode_error = '' ORDER BY notification_id, kafka_offset DESC LIMIT 1 BY notification_id) " +
		"WHERE at >= fromUnixTimestamp64Milli(?) ORDER BY at DESC, notification_id DESC LIMIT " + strconv.Itoa(feedReadLimit)
	rows, err := s.cfg.Dashboard.Conn.Query(ctx, q, tenant, recipient, since)
	if err != nil {
		return nil, fmt.Errorf("api: feed of %s: %w", recipient, err)
	}
	defer rows.Close()
	var items []schemas.FeedItem
	for rows.Next() {
		it := schemas.FeedItem{Schema: schemas.FeedItemV1, Tenant: tenant, Recipient: recipient}
		var payload string
		if err := rows.Scan(&it.NotificationID, &it.Type, &it.Title, &it.Body, &payload, &it.CreatedAt, &it.DeliveredAt, &it.ReadAt); err != nil {
			return nil, fmt.Errorf("api: feed of %s: %w", recipient, err)
		}
		if payload != "" {
			it.Payload = json.RawMessage(payload)
		}
		if at, ok := s.readMarks.get(schemas.FeedKey(tenant, recipient, it.NotificationID)); ok && it.ReadAt == 0 && at >= it.DeliveredAt {
			it.ReadAt = at // this instance's mark, not in the audit yet (not of a later delivery)
		}
		items = append(items, it)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("api: feed of %s: %w", recipient, err)
	}
	return items, nil
}

// feedPath reads the recipient of a feed route: the audit answers at once,
// the replica once it has caught up.
func (s *Server) feedPath(w http.ResponseWriter, r *http.Request) (string, bool) {
	if s.cfg.historyFromAudit() {
		return pathParam(w, r, "recipientId")
	}
	return s.readyPath(w, r, "recipientId")
}

// putFeed applies one herald.feed record (nil: a tombstone).
func (r *replica) putFeed(key string, it *schemas.FeedItem) {
	r.mu.Lock()
	defer r.mu.Unlock()
	prefix := schemas.RecipientPrefix(key)
	nid := strings.TrimPrefix(key, prefix+"/")
	if it == nil {
		delete(r.feed[prefix], nid)
		if len(r.feed[prefix]) == 0 {
			delete(r.feed, prefix)
		}
		return
	}
	if r.feed[prefix] == nil {
		r.feed[prefix] = map[string]schemas.FeedItem{}
	}
	r.feed[prefix][nid] = *it
}

// feedOf returns a recipient's items created at or after since, newest
// first (ties by notification id, descending).
func (r *replica) feedOf(tenant, recipient string, since int64) []schemas.FeedItem {
	r.mu.RLock()
	items := make([]schemas.FeedItem, 0, len(r.feed[schemas.RecipientKey(tenant, recipient)]))
	for _, it := range r.feed[schemas.RecipientKey(tenant, recipient)] {
		if it.CreatedAt >= since {
			items = append(items, it)
		}
	}
	r.mu.RUnlock()
	slices.SortFunc(items, func(a, b schemas.FeedItem) int {
		if c := cmp.Compare(b.CreatedAt, a.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(b.NotificationID, a.NotificationID)
	})
	return items
}

// FeedItem is one item of GET /v1/recipients/{recipientId}/feed.
type FeedItem struct {
	NotificationID string          `json:"notificationId"`
	Type           string          `json:"type"`
	Title          string          `json:"title"`
	Body           string          `json:"body"`
	Payload        json.RawMessage `json:"payload,omitempty"`
	CreatedAt      int64           `json:"createdAt"`
	Read           bool            `json:"read"`
	ReadAt         int64           `json:"readAt,omitempty"`
}

// FeedPage is the answer of GET /v1/recipients/{recipientId}/feed.
type FeedPage struct {
	Items       []FeedItem `json:"items"`
	UnreadCount int        `json:"unreadCount"`
	NextCursor  string     `json:"nextCursor,omitempty"`
}

const (
	defaultFeedLimit = 20
	maxFeedLimit     = 100
)

// feedSince is the oldest creation time served: the feed's retention
// (herald.feed's retention.ms) before now, so an item past it is gone
// from the API even before the broker deletes it.
func (s *Server) feedSince() int64 {
	return s.cfg.Now().UnixMilli() - s.cfg.Catalog.Options().FeedRetentionMs
}

// feedCursor is the position after an item: its creation time and id.
func feedCursor(it schemas.FeedItem) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(it.CreatedAt, 10) + ":" + it.NotificationID))
}

func parseFeedCursor(c string) (int64, string, bool) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, "", false
	}
	at, id, ok := strings.Cut(string(b), ":")
	n, err := strconv.ParseInt(at, 10, 64)
	return n, id, ok && err == nil
}

func (s *Server) getFeed(w http.ResponseWriter, r *http.Request, p principal) {
	recipient, ok := s.feedPath(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	limit := defaultFeedLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxFeedLimit {
			writeProblem(w, invalid("limit must be an integer from 1 to "+strconv.Itoa(maxFeedLimit), sdk.FieldError{Field: "query:limit", Message: "must be 1.." + strconv.Itoa(maxFeedLimit)}))
			return
		}
		limit = n
	}
	items, err := s.feedItems(r.Context(), p.tenant, recipient, s.feedSince())
	if err != nil {
		s.dashboardFailed(w, r, err)
		return
	}
	page := FeedPage{Items: []FeedItem{}}
	for _, it := range items {
		if it.ReadAt == 0 {
			page.UnreadCount++
		}
	}
	start := 0
	if c := q.Get("cursor"); c != "" {
		at, id, ok := parseFeedCursor(c)
		if !ok {
			writeProblem(w, invalid("cursor is not one this API gave", sdk.FieldError{Field: "query:cursor", Message: "unknown cursor"}))
			return
		}
		// The first item after the cursor's position in the order.
		start = len(items)
		for i, it := range items {
			if it.CreatedAt < at || it.CreatedAt == at && it.NotificationID < id {
				start = i
				break
			}
		}
	}
	end := min(start+limit, len(items))
	for _, it := range items[start:end] {
		page.Items = append(page.Items, FeedItem{NotificationID: it.NotificationID, Type: it.Type, Title: it.Title, Body: it.Body,
			Payload: it.Payload, CreatedAt: it.CreatedAt, Read: it.ReadAt != 0, ReadAt: it.ReadAt})
	}
	if end < len(items) {
		page.NextCursor = feedCursor(items[end-1])
	}
	writeJSON(w, http.StatusOK, page)
}

// markRead writes the items again with ReadAt now, in one transaction, and
// applies them to the replica once committed.
func (s *Server) markRead(w http.ResponseWriter, r *http.Request, items []schemas.FeedItem) bool {
	now := s.cfg.Now().UnixMilli()
	recs := make([]*kgo.Record, 0, len(items))
	for i := range items {
		items[i].ReadAt = now
		b, err := schemas.Encode(&items[i])
		if err != nil {
			writeProblem(w, invalid(err.Error()))
			return false
		}
		recs = append(recs, &kgo.Record{Topic: s.feedT, Key: []byte(schemas.FeedKey(items[i].Tenant, items[i].Recipient, items[i].NotificationID)),
			Value: b, Timestamp: time.Now(), Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(schemas.FeedItemV1)}}})
	}
	if len(recs) > 0 {
		if err := s.w.write(r.Context(), recs); err != nil {
			s.log.Warn("write failed", "topic", s.feedT, "err", err)
			writeProblem(w, unavailable("the read marks were not written; retry", 1))
			return false
		}
	}
	for i, rec := range recs {
		if s.cfg.historyFromAudit() {
			s.readMarks.put(string(rec.Key), items[i].ReadAt)
		} else {
			s.rep.putFeed(string(rec.Key), &items[i])
		}
	}
	return true
}

func (s *Server) postFeedRead(w http.ResponseWriter, r *http.Request, p principal) {
	recipient, ok := s.feedPath(w, r)
	if !ok {
		return
	}
	nid, ok := pathParam(w, r, "notificationId")
	if !ok {
		return
	}
	items, err := s.feedItems(r.Context(), p.tenant, recipient, s.feedSince())
	if err != nil {
		s.dashboardFailed(w, r, err)
		return
	}
	var found *schemas.FeedItem
	for _, it := range items {
		if it.NotificationID == nid {
			found = &it
			break
		}
	}
	switch {
	case found == nil:
		writeProblem(w, notFound("feed item"))
		return
	case found.ReadAt == 0 && !s.markRead(w, r, []schemas.FeedItem{*found}):
		return
	}
	w.WriteHeader(http.StatusNoContent) // already read: nothing to write
}

func (s *Server) postFeedReadAll(w http.ResponseWriter, r *http.Request, p principal) {
	recipient, ok := s.feedPath(w, r)
	if !ok {
		return
	}
	items, err := s.feedItems(r.Context(), p.tenant, recipient, s.feedSince())
	if err != nil {
		s.dashboardFailed(w, r, err)
		return
	}
	var unread []schemas.FeedItem
	for _, it := range items {
		if it.ReadAt == 0 {
			unread = append(unread, it)
		}
	}
	if !s.markRead(w, r, unread) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]int{"marked": len(unread)})
}
