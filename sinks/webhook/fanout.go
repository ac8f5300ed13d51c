package webhook

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/topics"
)

// Event is the body of one webhook message (Standard Webhooks' payload
// structure).
type Event struct {
	Type      string    `json:"type"`
	Timestamp string    `json:"timestamp"`
	Data      EventData `json:"data"`
}

// EventData is an event's data: the outcome it reports.
type EventData struct {
	EventID          string `json:"eventId"`
	DeliveryID       string `json:"deliveryId"`
	NotificationID   string `json:"notificationId"`
	NotificationType string `json:"notificationType"`
	Recipient        string `json:"recipient"`
	DeviceID         string `json:"deviceId"`
	Channel          string `json:"channel"`
	Status           string `json:"status"`
	Reason           string `json:"reason,omitempty"`
	Attempts         int    `json:"attempts"`
	At               int64  `json:"at"`
}

// EventsOf lists the event types an outcome raises (none for a webhook
// delivery's own outcome).
func EventsOf(o *schemas.Outcome) []string {
	if o.Channel == Channel {
		return nil
	}
	var evs []string
	switch o.Status {
	case schemas.OutcomeDelivered:
		evs = []string{schemas.EventDeliveryCompleted}
	case schemas.OutcomeFailed, schemas.OutcomeExpired, schemas.OutcomeDeadLettered:
		evs = []string{schemas.EventDeliveryCompleted, schemas.EventDeliveryFailed}
	case schemas.OutcomeDeviceRetired:
		evs = []string{schemas.EventDeliveryCompleted, schemas.EventDeviceRetired}
	}
	return evs
}

// Commands is the fan-out's pure function: the delivery commands of one
// outcome for a tenant's endpoints, one per event and enabled endpoint
// subscribed to it and created at or before the outcome. Their delivery
// ids (identity.DeliveryID of the event id and the endpoint id) and
// bodies depend only on the outcome and the endpoint, so an outcome read
// twice yields the same commands, which the sink's sent-set sends once.
func Commands(o *schemas.Outcome, endpoints []schemas.Webhook) []*schemas.DeliveryCommand {
	var out []*schemas.DeliveryCommand
	for _, ev := range EventsOf(o) {
		eventID := identity.WebhookEventID(o.DeliveryID, ev)
		var body []byte
		for _, ep := range endpoints {
			if !ep.Enabled || ep.Tenant != o.Tenant || o.At < ep.CreatedAt || !slices.Contains(ep.Events, ev) {
				continue
			}
			if body == nil {
				body, _ = json.Marshal(Event{ // only strings and numbers: cannot fail
					Type: ev, Timestamp: time.UnixMilli(o.At).UTC().Format("2006-01-02T15:04:05.000Z"),
					Data: EventData{EventID: eventID, DeliveryID: o.DeliveryID, NotificationID: o.NotificationID, NotificationType: o.Type,
						Recipient: o.Recipient, DeviceID: o.DeviceID, Channel: o.Channel, Status: o.Status, Reason: o.Reason,
						Attempts: o.Attempts, At: o.At},
				})
			}
			out = append(out, &schemas.DeliveryCommand{
				DeliveryID: identity.DeliveryID(eventID, ep.ID), NotificationID: o.NotificationID, Tenant: o.Tenant,
				Type: o.Type, Recipient: o.Recipient, DeviceID: ep.ID, Channel: Channel, CollapseID: "msg_" + eventID,
				Title: ev, Payload: body, CreatedAt: o.At,
			})
		}
	}
	return out
}

// FanOutOptions configure the fan-out stage.
type FanOutOptions struct {
	// The runtime's settings; Group is "herald-webhook-fanout" by default.
	stage.Instance
	Catalog *topics.Catalog
	Table   *Table
}

// NewFanOut builds the fan-out stage: herald.outcomes in,
// herald.deliveries.webhook out. Run it once its Table is ready.
func NewFanOut(o FanOutOptions) (*stage.Runner, error) {
	cfg, log, err := stageConfig(o.Instance, o.Catalog, o.Table, "webhook-fanout", topics.Outcomes)
	if err != nil {
		return nil, err
	}
	deliveries, completions := o.Catalog.Name(topics.Deliveries(Channel)), o.Catalog.Name(topics.Completions)
	cfg.Outputs = []string{deliveries, completions}
	cfg.NewTask = func(int32) stage.Task {
		return &fanTask{table: o.Table, topic: deliveries, completions: completions, log: log}
	}
	return stage.New(cfg)
}

// stageConfig is the runtime configuration of the webhook channel's stage
// name (the fan-out, the decisions forwarder, the completion stage),
// reading input: its group is "herald-"+name unless set, its dead letters
// go to herald.deadletters and its records are partitioned as the catalog
// says. It returns the stage's logger.
func stageConfig(inst stage.Instance, cat *topics.Catalog, table *Table, name, input string) (stage.Config, *slog.Logger, error) {
	if cat == nil || table == nil || inst.InstanceID == "" {
		return stage.Config{}, nil, fmt.Errorf("webhook: the %s stage needs Catalog, Table and InstanceID", name)
	}
	if inst.Group == "" {
		inst.Group = "herald-" + name
	}
	if inst.Logger == nil {
		inst.Logger = slog.Default()
	}
	cfg := inst.Config(name)
	cfg.Input, cfg.DeadLetterTopic = cat.Name(input), cat.Name(topics.DeadLetters)
	cfg.Partitioner = cat.Partitioner()
	return cfg, inst.Logger.With("stage", name), nil
}

// fanTask is the fan-out of one herald.outcomes partition: stateless (the
// endpoints are the shared Table).
type fanTask struct {
	stage.Stateless
	table       *Table
	topic       string
	completions string
	log         *slog.Logger
}

// Process emits the webhook deliveries of one outcome, and forwards it to
// herald.completions when its tenant has a send.completed endpoint (see
// completion.go); an undecodable record is skipped (logged): it raises
// no event.
func (f *fanTask) Process(r *kgo.Record, out *stage.Out) error {
	var o schemas.Outcome
	if err := schemas.Decode(r.Value, &o); err != nil {
		f.log.Warn("skip an undecodable outcome", "partition", r.Partition, "offset", r.Offset, "err", err)
		return nil
	}
	if EventsOf(&o) == nil {
		return nil
	}
	for _, cmd := range Commands(&o, f.table.Tenant(o.Tenant)) {
		b, err := schemas.Encode(cmd)
		if err != nil {
			return err // cannot happen: the command is built above
		}
		out.Emit(&kgo.Record{Topic: f.topic, Key: []byte(cmd.DeliveryID), Value: b,
			Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(cmd.SchemaName())}}})
	}
	if o.NotificationID != "" && f.table.Subscribed(o.Tenant, schemas.EventSendCompleted) {
		rec, err := forwardRecord(f.completions, schemas.Occurrence(o.NotificationID, o.OccurrenceID), &o)
		if err != nil {
			return err
		}
		out.Emit(rec)
	}
	return nil
}
