package deadletters

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/schemas"
)

// Kinds of dead letters.
const (
	// KindDelivery: a sink's delivery that failed; its command can be redriven.
	KindDelivery = "delivery"
	// KindUnreadable: a delivery command a sink could not read.
	KindUnreadable = "unreadable"
	// KindStage: a stage's input, or a timer's output, that could never be
	// written (a stage.DeadLetter).
	KindStage = "stage"
)

// Classes of dead letters, from their reason.
const (
	ClassPermanent  = "permanent"  // the provider refused it for good
	ClassExhausted  = "exhausted"  // retries exhausted
	ClassUnreadable = "unreadable" // a command no sink can read
	ClassUnwritable = "unwritable" // a stage's output the broker refuses
	ClassOther      = "other"
)

// Letter is one dead letter, as list and show answer it.
type Letter struct {
	// ID is the dead letter's position on herald.deadletters:
	// "<partition>-<offset>".
	ID string `json:"id"`
	// At is when it was dead-lettered (the record's time).
	At   time.Time `json:"at"`
	Kind string    `json:"kind"`
	// Stage is where it failed: "sink.<channel>", "dedupe", "route", ...
	Stage   string `json:"stage"`
	Channel string `json:"channel,omitempty"`
	Class   string `json:"class"`
	Reason  string `json:"reason"`
	// Attempts is the attempt the delivery failed at (deliveries only).
	Attempts       int    `json:"attempts,omitempty"`
	Tenant         string `json:"tenant,omitempty"`
	Type           string `json:"type,omitempty"`
	Recipient      string `json:"recipient,omitempty"`
	NotificationID string `json:"notificationId,omitempty"`
	DeliveryID     string `json:"deliveryId,omitempty"`
	DeviceID       string `json:"deviceId,omitempty"`
	// ExpiresAt is the command's expiry, if it has one.
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
	// Source names the input a stage or an unreadable command came from
	// (topic/partition@offset).
	Source string `json:"source,omitempty"`
	// Redrives are the redrives of this dead letter (normally at most one).
	Redrives []Marker `json:"redrives,omitempty"`

	// command is the delivery command (KindDelivery), value and headers
	// the record's, for a redrive.
	command *schemas.DeliveryCommand
	value   []byte
	headers []kgo.RecordHeader
	stage   *stage.DeadLetter
	// input is a stage's input the dead letter names, read for a redrive.
	input *kgo.Record
}

// Redriven reports whether the letter has been redriven.
func (l *Letter) Redriven() bool { return len(l.Redrives) > 0 }

// Input is what show answers as the original input: the delivery command
// with its device token and Web Push keys masked, or the stage's dead
// letter (the input's position), or nil.
func (l *Letter) Input() any {
	if l.command != nil {
		c := *l.command
		c.Token = mask(c.Token)
		if c.WebPush != nil {
			w := *c.WebPush
			w.P256dh, w.Auth = mask(w.P256dh), mask(w.Auth)
			c.WebPush = &w
		}
		return &c
	}
	if l.stage != nil {
		return l.stage
	}
	return nil
}

// mask keeps the last four characters of a secret.
func mask(s string) string {
	if len(s) <= 4 {
		return strings.Repeat("*", len(s))
	}
	return "…" + s[len(s)-4:]
}

// Marker is the record of one redrive of a dead letter, on
// herald.deadletters (header HeaderRedriven: the dead letter's id).
type Marker struct {
	// Redrive is the id of the redrive run.
	Redrive    string    `json:"redrive"`
	DeadLetter string    `json:"deadLetter"`
	DeliveryID string    `json:"deliveryId"`
	By         string    `json:"by"`
	Reason     string    `json:"reason"`
	At         time.Time `json:"at"`
}

// HeaderRedriven marks a redrive marker on herald.deadletters; its value is
// the id of the dead letter redriven.
const HeaderRedriven = "herald-redriven"

// Set is what the topic holds: every dead letter, oldest first, with its
// redrive markers.
type Set struct {
	Letters []*Letter
	byID    map[string]*Letter
	markers []Marker
}

// Get returns the dead letter of an id, nil if none.
func (s *Set) Get(id string) *Letter { return s.byID[id] }

// ValidID reports whether id has the form of a dead letter's id.
func ValidID(id string) bool {
	p, o, ok := strings.Cut(id, "-")
	if !ok {
		return false
	}
	pn, err1 := strconv.ParseInt(p, 10, 32)
	on, err2 := strconv.ParseInt(o, 10, 64)
	return err1 == nil && err2 == nil && pn >= 0 && on >= 0 && strconv.FormatInt(pn, 10) == p && strconv.FormatInt(on, 10) == o
}

func idOf(r *kgo.Record) string { return fmt.Sprintf("%d-%d", r.Partition, r.Offset) }

// build reads the records of herald.deadletters (data records only, in
// offset order per partition) into a Set.
func build(recs []*kgo.Record) *Set {
	s := newSet()
	for _, r := range recs {
		s.add(r, Filter{})
	}
	s.link()
	return s
}

func newSet() *Set { return &Set{byID: map[string]*Letter{}} }

// add reads one record: a marker is kept, a dead letter only if f selects
// it.
func (s *Set) add(r *kgo.Record, f Filter) {
	if v, ok := header(r, HeaderRedriven); ok {
		var m Marker
		if json.Unmarshal(r.Value, &m) == nil {
			m.DeadLetter = v
			s.markers = append(s.markers, m)
		}
		return
	}
	if l := letterOf(r); f.Match(l) {
		s.Letters = append(s.Letters, l)
		s.byID[l.ID] = l
	}
}

// link gives each dead letter its markers, and sorts the letters oldest
// first.
func (s *Set) link() {
	for _, m := range s.markers {
		if l := s.byID[m.DeadLetter]; l != nil {
			l.Redrives = append(l.Redrives, m)
		}
	}
	s.markers = nil
	sort.SliceStable(s.Letters, func(i, j int) bool { return s.Letters[i].At.Before(s.Letters[j].At) })
}

func header(r *kgo.Record, key string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// letterOf reads one dead letter record.
func letterOf(r *kgo.Record) *Letter {
	l := &Letter{ID: idOf(r), At: r.Timestamp.UTC(), value: r.Value, headers: r.Headers}
	if st, ok := header(r, stage.HeaderDeadLetter); ok {
		l.Kind, l.Stage, l.Class = KindStage, st, ClassUnwritable
		var d stage.DeadLetter
		if err := json.Unmarshal(r.Value, &d); err == nil {
			l.stage, l.Reason = &d, d.Reason
			l.Source = fmt.Sprintf("%s/%d@%d", d.Topic, d.Partition, d.Offset)
			if d.Timer {
				l.Source = d.Topic + " (a timer's output)"
			}
		} else {
			l.Reason = "unreadable stage dead letter: " + err.Error()
		}
		return l
	}
	l.Reason, _ = header(r, "herald-reason")
	src, _ := header(r, "herald-source")
	if n, err := strconv.Atoi(headerOr(r, "herald-attempts")); err == nil {
		l.Attempts = n
	}
	var cmd schemas.DeliveryCommand
	if err := schemas.Decode(r.Value, &cmd); err != nil || cmd.DeliveryID == "" || l.Attempts <= 0 {
		l.Kind, l.Class, l.Source = KindUnreadable, ClassUnreadable, src
		l.Stage = "sink"
		if strings.HasPrefix(src, "sink.") {
			l.Stage = src
		} else if ch, ok := strings.CutPrefix(topicOf(src), "deliveries."); ok {
			l.Stage, l.Channel = "sink."+ch, ch
		}
		return l
	}
	l.Kind, l.command = KindDelivery, &cmd
	l.Stage = src
	if l.Stage == "" {
		l.Stage = "sink." + cmd.Channel
	}
	l.Channel = strings.TrimPrefix(l.Stage, "sink.")
	l.Class = classOf(l.Reason)
	l.Tenant, l.Type, l.Recipient = cmd.Tenant, cmd.Type, cmd.Recipient
	l.NotificationID, l.DeliveryID, l.DeviceID = cmd.NotificationID, cmd.DeliveryID, cmd.DeviceID
	if cmd.ExpiresAt > 0 {
		t := time.UnixMilli(cmd.ExpiresAt).UTC()
		l.ExpiresAt = &t
	}
	return l
}

func headerOr(r *kgo.Record, key string) string { v, _ := header(r, key); return v }

// topicOf is the topic of "topic/partition@offset", without a prefix
// (the part from "deliveries." on).
func topicOf(src string) string {
	t, _, _ := strings.Cut(src, "/")
	if i := strings.Index(t, "deliveries."); i >= 0 {
		return t[i:]
	}
	return t
}

// classOf reads a sink's reason (sinks' decide).
func classOf(reason string) string {
	if strings.HasPrefix(reason, "permanent") {
		return ClassPermanent
	}
	if strings.HasPrefix(reason, "retries exhausted") {
		return ClassExhausted
	}
	return ClassOther
}

// Filter selects dead letters; a zero field selects all.
type Filter struct {
	// Stage: "sink.apns", "dedupe", "route", or "sink" for every sink.
	Stage   string
	Channel string
	// Class: permanent, exhausted, unreadable, unwritable, other.
	Class string
	// Reason selects letters whose reason contains it (case-insensitive).
	Reason string
	Tenant string
	Type   string
	// Since and Until bound when they were dead-lettered: [Since, Until).
	Since, Until time.Time
	// IDs selects these dead letters only.
	IDs []string
	// Redriven: "" all, "no" only those never redriven, "yes" only those
	// redriven.
	Redriven string
}

// Check names the first bad field of f.
func (f Filter) Check() error {
	for _, id := range f.IDs {
		if !ValidID(id) {
			return fmt.Errorf("id %q is not a dead letter id (<partition>-<offset>, as list prints)", id)
		}
	}
	switch f.Class {
	case "", ClassPermanent, ClassExhausted, ClassUnreadable, ClassUnwritable, ClassOther:
	default:
		return fmt.Errorf("class %q is not one of permanent, exhausted, unreadable, unwritable, other", f.Class)
	}
	switch f.Redriven {
	case "", "yes", "no":
	default:
		return fmt.Errorf("redriven %q is not yes or no", f.Redriven)
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Until.After(f.Since) {
		return fmt.Errorf("until (%s) is not after since (%s)", f.Until.Format(time.RFC3339), f.Since.Format(time.RFC3339))
	}
	return nil
}

// Match reports whether f selects l.
func (f Filter) Match(l *Letter) bool {
	if len(f.IDs) > 0 {
		found := false
		for _, id := range f.IDs {
			if id == l.ID {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	if f.Stage == "sink" {
		if !strings.HasPrefix(l.Stage, "sink") {
			return false
		}
	} else if f.Stage != "" && f.Stage != l.Stage {
		return false
	}
	if f.Channel != "" && f.Channel != l.Channel {
		return false
	}
	if f.Class != "" && f.Class != l.Class {
		return false
	}
	if f.Reason != "" && !strings.Contains(strings.ToLower(l.Reason), strings.ToLower(f.Reason)) {
		return false
	}
	if f.Tenant != "" && f.Tenant != l.Tenant {
		return false
	}
	if f.Type != "" && f.Type != l.Type {
		return false
	}
	if !f.Since.IsZero() && l.At.Before(f.Since) {
		return false
	}
	if !f.Until.IsZero() && !l.At.Before(f.Until) {
		return false
	}
	if f.Redriven == "yes" && !l.Redriven() || f.Redriven == "no" && l.Redriven() {
		return false
	}
	return true
}

// Select returns the letters f selects, oldest first.
func (s *Set) Select(f Filter) []*Letter {
	var out []*Letter
	for _, l := range s.Letters {
		if f.Match(l) {
			out = append(out, l)
		}
	}
	return out
}

// Count is the number of dead letters of one stage, class and reason.
type Count struct {
	Stage    string `json:"stage"`
	Class    string `json:"class"`
	Reason   string `json:"reason"`
	Letters  int    `json:"letters"`
	Redriven int    `json:"redriven"`
}

// Counts groups letters by stage, class and reason, most letters first.
func Counts(letters []*Letter) []Count {
	idx := map[[3]string]int{}
	var out []Count
	for _, l := range letters {
		k := [3]string{l.Stage, l.Class, l.Reason}
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, Count{Stage: l.Stage, Class: l.Class, Reason: l.Reason})
		}
		out[i].Letters++
		if l.Redriven() {
			out[i].Redriven++
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Letters > out[j].Letters })
	return out
}
