// Package route owns herald's second stage: for every notification the
// dedupe stage accepted (herald.accepted, partitioned by recipient), rate
// limits, digests, preferences, quiet hours and the fan-out to devices, into
// herald.deliveries.<channel>. Its state (rate counters, open digests,
// deferred deliveries) is the compacted changelog herald.route, and it reads
// the recipient's devices and preferences from the compacted topics
// herald.devices and herald.preferences, all co-partitioned with
// herald.accepted. A notification addressed to a group (a tag, a segment
// or every user: "@tag:vip", "@segment:beta", "@all") is resolved here,
// where the registry lives, into one notification per member, written back
// to herald.accepted in the transaction of the group's decision (see
// group.go: the fan-out step and why it is exactly once).
//
// Semantics, in this fixed order for each accepted notification (dedupe has
// already dropped duplicates and replays, so they never reach any of this
// and never count against a limit):
//
//  1. Rate limit, per (tenant, recipient, type), configurable per type and
//     per tenant and type. A FIXED window aligned to the Unix epoch: the
//     window of record time at is [at - at%W, at - at%W + W). At most Max
//     notifications pass per window; the others are rate_limited and do not
//     count. Hazard: a burst straddling a window boundary can pass up to
//     2×Max within W. A record older than the counter's window (out of
//     order) is counted in the counter's window, never in a fresh one.
//  2. Digest, per (tenant, recipient, digest key) for digest-enabled types:
//     the first notification opens a window of W at its record time; every
//     notification until the window ends is buffered and decided digested;
//     when the window ends one digest notification (count, titles, ids in
//     its payload) goes through steps 3–5 at the window's end.
//  3. Preferences: a type the user opted out of is opted_out entirely; a
//     channel the user opted out of is never used (one opted_out decision
//     per such channel that had a target); nothing left is an opted_out
//     decision for the notification, an audited skip.
//  4. Fan-out: one delivery command per enabled device of a wanted device
//     channel (ios→apns, android→fcm, web→webpush, and a registered
//     address, platform email→email), keyed by the delivery
//     id, and exactly one in-app feed item (device id "feed") per
//     notification when the feed is wanted. A request's targetDevice narrows
//     the push channels to that device (the feed item stays). No device on
//     any wanted device channel is no_target (audited); the type's fallback
//     channel (the feed) is then used if it was not already. A type with a
//     fallback chain (Policy.Chains) fans out its first step's channels
//     only; the later steps' commands are resolved now (preferences apply,
//     quiet hours do not) and written as the chain's plan to
//     herald.fallback in the decision's transaction, for the fallback
//     stage (processors/fallback), which sends each step when its
//     condition holds. The decision lists their deliveries in state
//     fallback and names the chain at the end of its detail (ChainOf).
//  5. Quiet hours, in the user's IANA time zone: push commands inside the
//     window are deferred (kept in the state, decision deferred with the
//     end) and released at the window's end; the feed item is not
//     deferred, nor is email unless the type is listed in QuietEmail.
//     Types listed as urgent go through. DST: "inside" is judged on the
//     local wall clock, and the end is the first instant after the record
//     time at which the local clock reads End; an End that falls in a
//     spring-forward gap ends the window at the transition. An unknown time
//     zone is read as UTC.
//
// Determinism and time. Decisions depend only on the records, their record
// times and the state, never on the wall clock, so replaying herald.accepted
// with the same devices and preferences reproduces every decision. Timers
// (rate-window expiry, digest ends, quiet-hours ends) fire when the task's
// clock reaches them: the partition's stream time (newest record time), and
// in a live stage also the wall clock minus a grace period, so a quiet
// partition still releases deferred pushes. Firing order never changes a
// decision; it can change how late records are grouped: a record whose
// record time falls inside a digest window that already fired (on the wall
// clock) opens a new digest, where a replay on stream time would have put it
// in the old one. The grace bounds that to records later than the grace.
//
// Devices and preferences are read as they are when the notification is
// decided (deferred deliveries are resolved when deferred and released as
// they are); a device registered concurrently with a notification may or may
// not receive it. A digest resolves devices when it fires.
package route

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	_ "time/tzdata" // IANA zones on hosts and images without a zoneinfo database

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/schemas"
)

// Push channels and the device platform each serves; FeedChannel needs no
// device.
const (
	FeedChannel = "feed"
	// FeedDevice is the device id of the in-app feed item.
	FeedDevice = "feed"
)

var pushChannels = []string{"apns", "fcm", "webpush"}

// EmailChannel delivers to a registered address (a device of platform
// email): fanned out like a push channel, never deferred by quiet hours.
const EmailChannel = "email"

// deviceChannels are the channels fanned out to devices.
var deviceChannels = []string{"apns", "fcm", "webpush", EmailChannel}

var platformChannel = map[string]string{"ios": "apns", "android": "fcm", "web": "webpush", "email": EmailChannel}

// AllChannels is what a notification without channels asks for.
var AllChannels = []string{"apns", "fcm", "webpush", FeedChannel, EmailChannel}

// RateLimit lets at most Max notifications through per fixed window.
type RateLimit struct {
	Max      int
	WindowMs int64
}

// Digest buffers a type's notifications for WindowMs under Key (the type's
// name when empty).
type Digest struct {
	WindowMs int64
	Key      string
}

// Policy is the route stage's configuration. The stage, the API's explain
// and replay must be given the same one.
type Policy struct {
	// Rates by "tenant/type" (that tenant only) or "type" (every tenant);
	// the tenant's entry wins. A type with neither is not limited.
	Rates map[string]RateLimit
	// Digests by type.
	Digests map[string]Digest
	// Urgent types ignore quiet hours.
	Urgent map[string]bool
	// QuietEmail types have their email deferred by quiet hours with the
	// pushes; the others' email is never deferred.
	QuietEmail map[string]bool
	// Fallback channel by type, used when no push device is reachable
	// (not for a type with a chain).
	Fallback map[string]string
	// MaxFanOut bounds the members a group notification reaches
	// (DefaultMaxFanOut when zero; see group.go).
	MaxFanOut int
	// Chains are the fallback chains by type (processors/fallback): the
	// first step's channels are fanned out now, the later steps' are
	// planned and sent by the fallback stage when their conditions hold.
	// Channels named in no step are not used for the type.
	Chains map[string]Chain
}

// Source locates the record being decided.
type Source struct {
	Topic     string
	Partition int32
	Offset    int64
}

// Change sets (Entry non-nil) or deletes one state key.
type Change struct {
	Key   string
	Entry *schemas.RouteEntry
}

// Result is everything one decision produces.
type Result struct {
	// Decisions: exactly one for the notification (Channel empty), plus one
	// per opted-out channel.
	Decisions []schemas.Decision
	State     []Change
	// Commands to emit now, in a stable order.
	Commands []schemas.DeliveryCommand
	// Accepted are a group notification's members' notifications, written
	// back to herald.accepted keyed by recipient (FanOut).
	Accepted []schemas.Accepted
	// Fallback is the plan of the type's fallback chain, for the fallback
	// stage (nil: the type has none, or no later step has a target).
	Fallback *schemas.Fallback
}

// Lookup returns the state under key, if any. The task fires every timer
// due at or before the record's time before deciding, so an entry found is
// live.
type Lookup func(key string) (schemas.RouteEntry, bool)

// Recipient is what the stage knows of the notification's recipient.
type Recipient struct {
	Devices []schemas.Device
	Prefs   *schemas.Preferences
}

// State keys. Every part is path-escaped, and each starts with the kind and
// the recipient key, so a recipient's state is one key range.
func rateKey(tenant, recipient, typ string) string {
	return string(schemas.RouteRate) + "/" + schemas.RecipientKey(tenant, recipient) + "/" + url.PathEscape(typ)
}

func digestKey(tenant, recipient, key string) string {
	return string(schemas.RouteDigest) + "/" + schemas.RecipientKey(tenant, recipient) + "/" + url.PathEscape(key)
}

func deferKey(tenant, recipient, nid string, at int64) string {
	return string(schemas.RouteDeferred) + "/" + schemas.RecipientKey(tenant, recipient) + "/" + nid + "/" + strconv.FormatInt(at, 10)
}

// Rate returns the limit of a tenant's type.
func (p Policy) Rate(tenant, typ string) (RateLimit, bool) {
	if r, ok := p.Rates[tenant+"/"+typ]; ok {
		return r, r.Max > 0 && r.WindowMs > 0
	}
	r, ok := p.Rates[typ]
	return r, ok && r.Max > 0 && r.WindowMs > 0
}

func (p Policy) digest(typ string) (Digest, bool) {
	d, ok := p.Digests[typ]
	if !ok || d.WindowMs <= 0 {
		return Digest{}, false
	}
	if d.Key == "" {
		d.Key = typ
	}
	return d, true
}

// Decide is the stage's pure decision function for one accepted
// notification at record time at.
func (p Policy) Decide(n schemas.Accepted, at int64, src Source, lookup Lookup, who Recipient) Result {
	d := decision(n, at, src, "route/"+src.Topic+"/"+strconv.Itoa(int(src.Partition))+"/"+strconv.FormatInt(src.Offset, 10))
	if msg := invalid(n); msg != "" {
		d.Outcome, d.Detail = schemas.DecisionRejected, msg
		return Result{Decisions: []schemas.Decision{d}}
	}
	var res Result
	if lim, ok := p.Rate(n.Tenant, n.Type); ok {
		key := rateKey(n.Tenant, n.Recipient, n.Type)
		start := at - at%lim.WindowMs
		e, ok := lookup(key)
		if !ok || e.WindowStart < start {
			e = schemas.RouteEntry{Kind: schemas.RouteRate, Tenant: n.Tenant, Recipient: n.Recipient, Type: n.Type,
				WindowStart: start, DueAt: start + lim.WindowMs}
		}
		if e.Count >= lim.Max {
			d.Outcome = schemas.DecisionRateLimited
			d.Detail = fmt.Sprintf("%d of %d in the window from %s", e.Count, lim.Max, fmtTime(e.WindowStart))
			return Result{Decisions: []schemas.Decision{d}}
		}
		e.Count++
		res.State = append(res.State, Change{Key: key, Entry: &e})
	}
	if dg, ok := p.digest(n.Type); ok {
		key := digestKey(n.Tenant, n.Recipient, dg.Key)
		e, ok := lookup(key)
		if !ok {
			e = schemas.RouteEntry{Kind: schemas.RouteDigest, Tenant: n.Tenant, Recipient: n.Recipient, Type: n.Type,
				DigestKey: dg.Key, WindowStart: at, DueAt: at + dg.WindowMs}
		}
		e.Items = append(slices.Clip(e.Items), schemas.DigestItem{NotificationID: n.NotificationID, RequestID: n.RequestID, Title: n.Title, At: at})
		e.Count = len(e.Items)
		res.State = append(res.State, Change{Key: key, Entry: &e})
		d.Outcome = schemas.DecisionDigested
		d.Detail = fmt.Sprintf("digest %s until %s", dg.Key, fmtTime(e.DueAt))
		res.Decisions = append(res.Decisions, d)
		return res
	}
	p.deliver(n, at, d, who, &res)
	return res
}

// Fire is the pure function of a timer: the entry under key, due at its
// DueAt, fired at record time at (≥ DueAt). It deletes the entry and
// returns what it releases.
func (p Policy) Fire(key string, e schemas.RouteEntry, who Recipient) Result {
	res := Result{State: []Change{{Key: key}}}
	switch e.Kind {
	case schemas.RouteDeferred:
		d := schemas.Decision{DecisionID: "route/release/" + key, Stage: "route", Outcome: schemas.DecisionRouted,
			Detail: "released at the end of quiet hours", Tenant: e.Tenant, Type: e.Type, Recipient: e.Recipient,
			NotificationID: e.NotificationID, At: e.DueAt}
		res.Decisions = append(res.Decisions, d)
		res.Commands = append(res.Commands, e.Commands...)
	case schemas.RouteDigest:
		n := digestNotification(e)
		d := decision(n, e.DueAt, Source{}, "route/digest/"+key+"/"+strconv.FormatInt(e.WindowStart, 10))
		p.deliver(n, e.DueAt, d, who, &res)
	}
	return res
}

// digestNotification is the one notification a digest sends: its id is
// derived from the digest key and window, so a replay derives the same.
func digestNotification(e schemas.RouteEntry) schemas.Accepted {
	type item struct {
		NotificationID string `json:"notificationId"`
		Title          string `json:"title"`
		At             int64  `json:"at"`
	}
	items := make([]item, len(e.Items))
	titles := make([]string, len(e.Items))
	for i, it := range e.Items {
		items[i] = item{it.NotificationID, it.Title, it.At}
		titles[i] = it.Title
	}
	payload, _ := json.Marshal(struct { // strings and ints only: cannot fail
		Digest struct {
			Key   string `json:"key"`
			Count int    `json:"count"`
			Items []item `json:"items"`
		} `json:"digest"`
	}{Digest: struct {
		Key   string `json:"key"`
		Count int    `json:"count"`
		Items []item `json:"items"`
	}{e.DigestKey, len(items), items}})
	title := fmt.Sprintf("%d new notifications", len(items))
	if len(items) == 1 {
		title = titles[0]
	}
	return schemas.Accepted{
		NotificationID: identity.DedupeID(e.Tenant, e.Type, e.Recipient, "herald:digest:"+e.DigestKey+":"+strconv.FormatInt(e.WindowStart, 10)),
		Tenant:         e.Tenant, Type: e.Type, Recipient: e.Recipient,
		Title: title, Body: strings.Join(titles, "\n"), Payload: payload,
		RequestedAt: e.WindowStart, AcceptedAt: e.DueAt,
	}
}

// deliver runs preferences, fan-out and quiet hours for n at time at, with
// d the notification-level decision to complete.
func (p Policy) deliver(n schemas.Accepted, at int64, d schemas.Decision, who Recipient, res *Result) {
	prefs := who.Prefs
	if prefs != nil && slices.Contains(prefs.OptedOutTypes, n.Type) {
		d.Outcome, d.Detail = schemas.DecisionOptedOut, "type opted out"
		res.Decisions = append(res.Decisions, d)
		return
	}
	wanted := n.Channels
	if len(wanted) == 0 {
		wanted = AllChannels
	}
	chain := p.Chains[n.Type]
	asked := wanted
	if chain != nil {
		wanted = intersect(wanted, chain[0].Channels)
	}
	optedOut := func(ch string) bool {
		if prefs == nil {
			return false
		}
		on, listed := prefs.Channels[ch]
		return listed && !on
	}

	var push, mail, feed []schemas.DeliveryCommand
	var skipped []string // opted-out channels that had a target
	var deviceWanted bool
	for _, ch := range deviceChannels {
		if !slices.Contains(wanted, ch) {
			continue
		}
		cmds := deviceCommands(n, ch, who, at)
		if optedOut(ch) {
			if len(cmds) > 0 {
				skipped = append(skipped, ch)
			}
			continue
		}
		deviceWanted = true
		if ch == EmailChannel {
			mail = append(mail, cmds...)
		} else {
			push = append(push, cmds...)
		}
	}
	useFeed := func() {
		if optedOut(FeedChannel) {
			skipped = append(skipped, FeedChannel)
			return
		}
		feed = append(feed, command(n, FeedChannel, schemas.Device{DeviceID: FeedDevice}, at))
	}
	if slices.Contains(wanted, FeedChannel) {
		useFeed()
	}
	noTarget := deviceWanted && len(push) == 0 && len(mail) == 0
	var fallback string
	if noTarget && chain == nil && len(feed) == 0 && !slices.Contains(skipped, FeedChannel) && p.Fallback[n.Type] == FeedChannel {
		useFeed()
		if len(feed) > 0 {
			fallback = FeedChannel
		}
	}
	for _, ch := range skipped {
		c := d
		c.DecisionID += "/" + ch
		c.Channel, c.Outcome, c.Detail = ch, schemas.DecisionOptedOut, "channel opted out"
		res.Decisions = append(res.Decisions, c)
	}

	if p.QuietEmail[n.Type] { // the type's email waits out quiet hours like its pushes
		push, mail = append(push, mail...), nil
	}
	var until int64
	if len(push) > 0 && !p.Urgent[n.Type] && prefs != nil && prefs.QuietHours != nil {
		until, _ = QuietUntil(at, *prefs.QuietHours)
	}
	if noTarget {
		d.Outcome = schemas.DecisionNoTarget
		d.Detail = "no enabled device on " + strings.Join(intersect(deviceChannels, wanted), ", ")
		if fallback != "" {
			d.Detail += "; fallback " + fallback
		}
	} else if len(push) == 0 && len(mail) == 0 && len(feed) == 0 {
		d.Outcome = schemas.DecisionOptedOut
		d.Detail = "every channel opted out"
		if len(skipped) == 0 {
			d.Detail = "no channel asked for"
		}
	} else if until > 0 {
		d.Outcome = schemas.DecisionDeferred
		d.Detail = "quiet hours until " + fmtTime(until)
		for i := range push {
			push[i].NotBefore = until
		}
		key := deferKey(n.Tenant, n.Recipient, n.NotificationID, at)
		res.State = append(res.State, Change{Key: key, Entry: &schemas.RouteEntry{Kind: schemas.RouteDeferred,
			Tenant: n.Tenant, Recipient: n.Recipient, Type: n.Type, DueAt: until, NotificationID: n.NotificationID, Commands: push}})
		push = nil
	} else {
		d.Outcome = schemas.DecisionRouted
	}
	for _, c := range res.State {
		if c.Entry != nil && c.Entry.Kind == schemas.RouteDeferred {
			d.Deliveries = appendDeliveries(d.Deliveries, c.Entry.Commands, schemas.DeliveryDeferred)
		}
	}
	d.Deliveries = appendDeliveries(d.Deliveries, push, schemas.DeliveryQueued)
	d.Deliveries = appendDeliveries(d.Deliveries, mail, schemas.DeliveryQueued)
	d.Deliveries = appendDeliveries(d.Deliveries, feed, schemas.DeliveryQueued)
	if chain != nil {
		if plan := planChain(n, at, max(at, until), chain, asked, optedOut, who, d.Deliveries); plan != nil {
			res.Fallback = plan
			d.Deliveries = appendDeliveries(d.Deliveries, laterCommands(plan), schemas.DeliveryFallback)
			if d.Detail != "" {
				d.Detail += "; "
			}
			d.Detail += FallbackChainPrefix + plan.Chain
		}
	}
	res.Decisions = append(res.Decisions, d)
	res.Commands = append(res.Commands, push...)
	res.Commands = append(res.Commands, mail...)
	res.Commands = append(res.Commands, feed...)
}

// deviceCommands are n's deliveries on device channel ch: one per enabled
// device of the recipient on it (the target device only, when named).
func deviceCommands(n schemas.Accepted, ch string, who Recipient, at int64) []schemas.DeliveryCommand {
	var cmds []schemas.DeliveryCommand
	for _, dev := range sortedDevices(who.Devices) {
		if platformChannel[dev.Platform] != ch || !dev.Enabled || dev.RetiredReason != "" ||
			dev.Tenant != n.Tenant || dev.Recipient != n.Recipient ||
			(n.TargetDevice != "" && dev.DeviceID != n.TargetDevice) {
			continue
		}
		cmds = append(cmds, command(n, ch, dev, at))
	}
	return cmds
}

// planChain is the plan of n's fallback chain, for the fallback stage:
// the first step's deliveries (first, the route decision's), started at
// start (the end of quiet hours when its pushes wait for it), and every
// later step's commands, resolved now on the channels n asked for that
// the recipient did not opt out of. nil when no later step has a target:
// there is nothing to fall back to. A later step is never deferred by
// quiet hours.
func planChain(n schemas.Accepted, at, start int64, chain Chain, asked []string, optedOut func(string) bool, who Recipient,
	first []schemas.DecisionDelivery) *schemas.Fallback {
	plan := &schemas.Fallback{NotificationID: n.NotificationID, OccurrenceID: n.OccurrenceID, Tenant: n.Tenant, Type: n.Type,
		Recipient: n.Recipient, RequestID: n.RequestID, Chain: chain.String(), PlannedAt: start, FirstAt: at}
	targets := 0
	for i, st := range chain {
		step := schemas.FallbackStep{Channels: st.Channels, AfterMs: st.AfterMs, Unless: st.Unless, IfFailed: st.IfFailed}
		if i == 0 {
			for _, dl := range first {
				step.Deliveries = append(step.Deliveries, dl.DeliveryID)
			}
			step.State, step.At, step.Reason = schemas.FallbackFired, start, "the route stage's fan-out"
			plan.Steps = append(plan.Steps, step)
			continue
		}
		for _, ch := range st.Channels {
			if !slices.Contains(asked, ch) || optedOut(ch) {
				continue
			}
			if ch == FeedChannel {
				step.Commands = append(step.Commands, command(n, FeedChannel, schemas.Device{DeviceID: FeedDevice}, at))
			} else {
				step.Commands = append(step.Commands, deviceCommands(n, ch, who, at)...)
			}
		}
		for _, c := range step.Commands {
			step.Deliveries = append(step.Deliveries, c.DeliveryID)
		}
		targets += len(step.Commands)
		plan.Steps = append(plan.Steps, step)
	}
	if targets == 0 {
		return nil
	}
	return plan
}

// laterCommands are the commands of a plan's steps after the first.
func laterCommands(plan *schemas.Fallback) []schemas.DeliveryCommand {
	var out []schemas.DeliveryCommand
	for _, st := range plan.Steps[1:] {
		out = append(out, st.Commands...)
	}
	return out
}

func appendDeliveries(ds []schemas.DecisionDelivery, cmds []schemas.DeliveryCommand, state string) []schemas.DecisionDelivery {
	for _, c := range cmds {
		ds = append(ds, schemas.DecisionDelivery{DeliveryID: c.DeliveryID, Channel: c.Channel, DeviceID: c.DeviceID, State: state, NotBefore: c.NotBefore})
	}
	return ds
}

func intersect(a, b []string) []string {
	var out []string
	for _, x := range a {
		if slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

func sortedDevices(ds []schemas.Device) []schemas.Device {
	if sort.SliceIsSorted(ds, func(i, j int) bool { return ds[i].DeviceID < ds[j].DeviceID }) {
		return ds
	}
	out := slices.Clone(ds)
	sort.Slice(out, func(i, j int) bool { return out[i].DeviceID < out[j].DeviceID })
	return out
}

// command is the delivery of n to one device on one channel. The delivery
// id and the apns-id come from n's occurrence, so a notification accepted
// again after its dedupe window is a new delivery; collapse ids and the
// Web Push Topic come from the notification id, so the device shows the
// newer occurrence in place of the older one (see identity).
func command(n schemas.Accepted, ch string, dev schemas.Device, at int64) schemas.DeliveryCommand {
	occurrence := schemas.Occurrence(n.NotificationID, n.OccurrenceID)
	c := schemas.DeliveryCommand{
		DeliveryID: identity.DeliveryID(occurrence, dev.DeviceID), NotificationID: n.NotificationID, OccurrenceID: n.OccurrenceID,
		Tenant: n.Tenant, Type: n.Type, Recipient: n.Recipient, DeviceID: dev.DeviceID, Channel: ch,
		Token: dev.Token, WebPush: dev.WebPush, CollapseID: n.NotificationID,
		Title: n.Title, Body: n.Body, Payload: n.Payload, Locale: n.Locale, CreatedAt: at,
	}
	if c.Locale == "" {
		c.Locale = dev.Locale
	}
	switch ch {
	case "apns":
		c.APNsID = identity.APNsID(occurrence)
	case "webpush":
		c.Topic, _ = identity.WebPushTopic(n.NotificationID) // n is valid: cannot fail
	}
	return c
}

func decision(n schemas.Accepted, at int64, src Source, id string) schemas.Decision {
	return schemas.Decision{
		DecisionID: id, Stage: "route", RequestID: n.RequestID, Tenant: n.Tenant, Type: n.Type,
		Recipient: n.Recipient, NotificationID: n.NotificationID, OccurrenceID: n.OccurrenceID, DedupeKey: n.DedupeKey,
		IdempotencyKey: n.IdempotencyKey, Producer: n.Producer, At: at,
		SourceTopic: src.Topic, SourcePartition: src.Partition, SourceOffset: src.Offset,
	}
}

func invalid(n schemas.Accepted) string {
	if n.Tenant == "" {
		return "tenant is empty"
	} else if n.Type == "" {
		return "type is empty"
	} else if n.Recipient == "" {
		return "recipient is empty"
	} else if !identity.Valid(n.NotificationID) {
		return "notificationId is not 32 lower-case hex characters"
	} else if n.OccurrenceID != "" && !identity.Valid(n.OccurrenceID) {
		return "occurrenceId is not 32 lower-case hex characters"
	}
	return ""
}

func fmtTime(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339) }

// QuietUntil reports whether record time at falls in the quiet hours q, and
// if so returns the end of the window (ms); 0 when at is outside, when the
// window is empty (Start = End) or when Start or End is malformed.
func QuietUntil(at int64, q schemas.QuietHours) (int64, bool) {
	s, ok1 := minutes(q.Start)
	e, ok2 := minutes(q.End)
	if !ok1 || !ok2 || s == e {
		return 0, false
	}
	loc := zone(q.TimeZone)
	t := time.UnixMilli(at).In(loc)
	m := t.Hour()*60 + t.Minute()
	in := m >= s && m < e
	if s > e { // spans midnight
		in = m >= s || m < e
	}
	if !in {
		return 0, false
	}
	y, mo, d := t.Date()
	if s > e && m >= s {
		d++
	}
	return firstLocal(y, mo, d, e/60, e%60, loc, t).UnixMilli(), true
}

// firstLocal returns the first instant after `after` at which loc's wall
// clock reads y-mo-d hh:mm, or, when that wall time does not exist (a
// spring-forward gap), the transition that skips it.
func firstLocal(y int, mo time.Month, d, hh, mm int, loc *time.Location, after time.Time) time.Time {
	naive := time.Date(y, mo, d, hh, mm, 0, 0, time.UTC)
	want := naive.Format("2006-01-02T15:04")
	var best, gap time.Time
	for _, probe := range []time.Time{naive.Add(-24 * time.Hour), naive.Add(24 * time.Hour)} {
		_, off := probe.In(loc).Zone()
		u := naive.Add(-time.Duration(off) * time.Second)
		if u.In(loc).Format("2006-01-02T15:04") == want {
			if u.After(after) && (best.IsZero() || u.Before(best)) {
				best = u
			}
		} else if gap.IsZero() || u.Before(gap) {
			gap = u
		}
	}
	if !best.IsZero() {
		return best
	}
	if !gap.IsZero() {
		if _, end := gap.In(loc).ZoneBounds(); !end.IsZero() && end.After(after) {
			return end
		}
	}
	// Unreachable for real zones; a day later is safe.
	return naive.Add(24 * time.Hour)
}

func minutes(hhmm string) (int, bool) {
	h, m, ok := strings.Cut(hhmm, ":")
	if !ok || len(h) != 2 || len(m) != 2 {
		return 0, false
	}
	hi, err1 := strconv.Atoi(h)
	mi, err2 := strconv.Atoi(m)
	if err1 != nil || err2 != nil || hi < 0 || hi > 23 || mi < 0 || mi > 59 {
		return 0, false
	}
	return hi*60 + mi, true
}

var zones sync.Map // name → *time.Location, names that loaded only

// zone loads an IANA zone once; an unknown name is UTC. Only zones that
// load are kept: they are a bounded set, whereas the names records carry
// are not (the API refuses unknown zones, but other producers may write
// any), so an unknown name is looked up again each time, quietly.
func zone(name string) *time.Location {
	if l, ok := zones.Load(name); ok {
		return l.(*time.Location)
	}
	l, err := time.LoadLocation(name)
	if err != nil {
		return time.UTC
	}
	zones.Store(name, l)
	return l
}
