package audit

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/heraldhq/herald/schemas"
)

// SameContent is one device that the same content reached under two
// different notification ids: what a customer reports as "I got this
// twice" when the producer sent one event twice under different keys.
// herald's dedupe cannot see it (the ids differ, so do the keys), and the
// verdict does not count it (each notification was sent once); the audit
// names both ids and their keys so the producer's bug can be found.
type SameContent struct {
	Tenant, Type, Title, Body string
	Channel, DeviceID         string
	// First and Second are the two notifications, in the order they
	// reached the device.
	First, Second Reached
}

// Reached is one notification that reached a device: its id, the keys its
// requests carried, and when its first attempt was sent.
type Reached struct {
	NotificationID  string
	IdempotencyKeys []string
	DedupeKeys      []string
	At              time.Time
}

// Warning is the finding in one sentence.
func (s SameContent) Warning() string {
	where := s.Channel + " device " + s.DeviceID
	if s.Channel == "feed" {
		where = "the in-app feed"
	}
	return fmt.Sprintf("the same content (%s, title %q, body %q) reached %s under two notification ids, %s apart: "+
		"%s at %s (%s) and %s at %s (%s). The producer sent this twice under different keys.",
		s.Type, s.Title, s.Body, where, s.Second.At.Sub(s.First.At).Round(time.Millisecond),
		s.First.NotificationID, stamp(s.First.At), s.First.keys(), s.Second.NotificationID, stamp(s.Second.At), s.Second.keys())
}

func (r Reached) keys() string {
	list := func(ks []string) string {
		if len(ks) == 0 {
			return "none"
		}
		return strings.Join(ks, ", ")
	}
	return "idempotency key " + list(r.IdempotencyKeys) + "; dedupe key " + list(r.DedupeKeys)
}

// SameContent finds, among the timeline's notifications, every pair of
// different notification ids with the same content (tenant, type, title
// and body of their requests) whose sent attempts reached the same device
// (channel and device id) at most window apart. A notification is compared
// only with those the timeline holds: a recipient's timeline holds every
// notification of the recipient in its time range. The same id sent twice
// is the verdict's business, not this.
func (tl *Timeline) SameContent(window time.Duration) []SameContent {
	type content struct{ tenant, typ, title, body string }
	type about struct {
		content
		idem, dedupe []string
	}
	notes := map[string]*about{}
	for _, r := range tl.Requests {
		a, ok := notes[r.NotificationID]
		if !ok {
			a = &about{content: content{r.Tenant, r.Type, r.Title, r.Body}}
			notes[r.NotificationID] = a
		}
		a.idem = addOnce(a.idem, r.IdempotencyKey)
		a.dedupe = addOnce(a.dedupe, r.DedupeKey)
	}
	// The first sent attempt of each notification to each device.
	type reach struct {
		channel, device, nid string
		at                   time.Time
	}
	first := map[[3]string]time.Time{}
	for _, a := range tl.Attempts {
		if a.Result != schemas.AttemptSent || notes[a.NotificationID] == nil {
			continue
		}
		k := [3]string{a.Channel, a.DeviceID, a.NotificationID}
		if t, ok := first[k]; !ok || a.At.Before(t) {
			first[k] = a.At
		}
	}
	byDevice := map[[2]string][]reach{}
	for k, at := range first {
		byDevice[[2]string{k[0], k[1]}] = append(byDevice[[2]string{k[0], k[1]}], reach{k[0], k[1], k[2], at})
	}
	var out []SameContent
	for _, rs := range byDevice {
		sort.Slice(rs, func(i, j int) bool {
			if !rs[i].at.Equal(rs[j].at) {
				return rs[i].at.Before(rs[j].at)
			}
			return rs[i].nid < rs[j].nid
		})
		for i := range rs {
			for j := i + 1; j < len(rs) && rs[j].at.Sub(rs[i].at) <= window; j++ {
				a, b := notes[rs[i].nid], notes[rs[j].nid]
				if a.content != b.content {
					continue
				}
				out = append(out, SameContent{
					Tenant: a.tenant, Type: a.typ, Title: a.title, Body: a.body, Channel: rs[i].channel, DeviceID: rs[i].device,
					First:  Reached{rs[i].nid, a.idem, a.dedupe, rs[i].at},
					Second: Reached{rs[j].nid, b.idem, b.dedupe, rs[j].at},
				})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].First.At.Equal(out[j].First.At) {
			return out[i].First.At.Before(out[j].First.At)
		}
		if out[i].Channel != out[j].Channel {
			return out[i].Channel < out[j].Channel
		}
		return out[i].DeviceID < out[j].DeviceID
	})
	return out
}

func addOnce(list []string, s string) []string {
	if s == "" {
		return list
	}
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}
