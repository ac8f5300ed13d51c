// Package feed owns herald's in-app feed channel on the sink runtime
// (package sinks): a delivery on herald.deliveries.feed becomes one
// schemas.FeedItem on the compacted topic herald.feed, keyed by
// tenant/recipient/notification id (schemas.FeedKey), written in the
// transaction that consumes the command (the runtime's sinks.Writer path).
// So each item is written exactly once per delivery (the transaction and
// the sent-set), and a recipient has one item per notification however
// many deliveries name it (the key). The API serves the feed (GET
// /v1/recipients/{recipientId}/feed) and writes read marks to the same key.
//
// There is no provider to call, so no classification table: a write
// either commits with the input (success, rule "written") or the command
// cannot be encoded (permanent, rule "unwritable", dead-lettered).
package feed

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks"
	"github.com/heraldhq/herald/topics"
)

// Channel is the feed's channel name.
const Channel = "feed"

// Feed is the feed channel's adapter: a sinks.Writer.
type Feed struct{ topic string }

// New returns the adapter writing to the catalog's herald.feed.
func New(cat *topics.Catalog) *Feed { return &Feed{topic: cat.Name(topics.Feed)} }

// Item is the feed item of a delivery written at now.
func Item(cmd *schemas.DeliveryCommand, now time.Time) *schemas.FeedItem {
	created := cmd.CreatedAt
	if created <= 0 {
		created = now.UnixMilli()
	}
	return &schemas.FeedItem{Tenant: cmd.Tenant, Recipient: cmd.Recipient, NotificationID: cmd.NotificationID, Type: cmd.Type,
		Title: cmd.Title, Body: cmd.Body, Payload: cmd.Payload, CreatedAt: created, DeliveredAt: now.UnixMilli()}
}

// Records implements sinks.Writer: the one feed item of the delivery.
func (f *Feed) Records(cmd *schemas.DeliveryCommand, now time.Time) ([]*kgo.Record, error) {
	if cmd.Tenant == "" || cmd.Recipient == "" || cmd.NotificationID == "" {
		return nil, errors.New("feed: a delivery without tenant, recipient or notification id")
	}
	it := Item(cmd, now)
	b, err := schemas.Encode(it)
	if err != nil {
		return nil, err
	}
	return []*kgo.Record{{Topic: f.topic, Key: []byte(schemas.FeedKey(cmd.Tenant, cmd.Recipient, cmd.NotificationID)), Value: b,
		Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(it.SchemaName())}}}}, nil
}

// Send implements sinks.Provider; the runtime never calls it for a
// Writer.
func (f *Feed) Send(context.Context, *schemas.DeliveryCommand) sinks.Result {
	return sinks.Result{Class: sinks.Permanent, Rule: "unwritable", Err: errors.New("feed: written in the transaction, never sent")}
}
