package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/internal/reply"
	"github.com/heraldhq/herald/processors/dedupe"
	routestage "github.com/heraldhq/herald/processors/route"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sdk"
	"github.com/heraldhq/herald/topics"
)

// Limits of a send's fields (characters, as JSON Schema counts them); the
// OpenAPI document states the same.
const (
	maxIDLen       = 256 // type, recipients, user and device ids, keys
	maxTitleLen    = 512
	maxBodyLen     = 4096
	maxLocaleLen   = 35
	maxWindowMs    = 30 * 24 * 3600 * 1000
	headerIdemKey  = "Idempotency-Key"
	headerReplayed = "Idempotency-Replayed"
)

// ConsistencyReadYourWrites is explain's consistency: its dedupe answer
// (wouldDeduplicate, wouldReplay, wouldConflict) comes from the dedupe
// stage and its route answer (wouldRateLimit, wouldDigest, wouldDefer,
// channels, devices) from the route stage, each reflecting every record
// appended before it in its partition.
const ConsistencyReadYourWrites = "read-your-writes"

// send is a validated POST /v1/notifications or /v1/explain body.
type send struct {
	n            sdk.Notification
	recipients   []string
	targetDevice string
}

// parseSend validates a send body; every problem names its field. Device
// targets are resolved to their user through the replica.
func (s *Server) parseSend(body []byte, r *http.Request, p principal) (*send, *problem) {
	f := newFields(body, "")
	if f.members == nil {
		return nil, f.problem()
	}
	var n sdk.Notification
	typ := f.text("type", false, maxIDLen)
	alias := f.text("notificationId", false, maxIDLen)
	switch {
	case !f.has("type") && !f.has("notificationId"):
		f.fail("type", "is required")
	case f.has("type") && f.has("notificationId") && typ != alias:
		f.fail("notificationId", "is an alias of type; when both are given they must be equal")
	}
	n.Type = typ
	if n.Type == "" {
		n.Type = alias
	}

	var recipients []string
	given := 0
	for _, name := range []string{"recipients", "recipientId", "target"} {
		if f.has(name) {
			given++
		}
	}
	switch {
	case given == 0:
		f.fail("target", "is required: give recipients, recipientId or target")
	case given > 1:
		f.fail("target", "give exactly one of recipients, recipientId and target")
	}
	if list, ok := f.strings("recipients"); ok {
		switch {
		case len(list) == 0:
			f.fail("recipients", "must not be empty")
		case len(list) > s.cfg.MaxRecipients:
			f.fail("recipients", fmt.Sprintf("at most %d recipients in one send", s.cfg.MaxRecipients))
		default:
			f.distinctIDs("recipients", list)
			for i, id := range list {
				reservedRecipient(f, fmt.Sprintf("recipients[%d]", i), id)
			}
		}
		recipients = list
	}
	if id := f.text("recipientId", false, maxIDLen); id != "" {
		reservedRecipient(f, "recipientId", id)
		recipients = []string{id}
	}
	var kind, targetDevice, targetUser, targetTag, targetSegment string
	if f.has("target") {
		if t := f.child("target"); t != nil {
			switch kind = t.text("kind", true, 16); kind {
			case sdk.TargetUser:
				targetUser = t.text("userId", true, maxIDLen)
				reservedRecipient(t, "userId", targetUser)
				recipients = []string{targetUser}
			case sdk.TargetDevice:
				targetDevice = t.text("deviceId", true, maxIDLen)
				targetUser = t.text("userId", false, maxIDLen)
				reservedRecipient(t, "userId", targetUser)
			case sdk.TargetTag:
				targetTag = t.text("tag", true, maxIDLen)
			case sdk.TargetSegment:
				targetSegment = t.text("segment", true, maxIDLen)
			case sdk.TargetAll:
			case "":
			default:
				t.fail("kind", "must be one of user, device, tag, segment and all")
			}
			// A member of another kind would be silently ignored: refuse it
			// (after checking its type, so a wrong type stays a 400).
			for _, name := range []string{"userId", "deviceId", "tag", "segment"} {
				if t.has(name) && !t.asked(name) {
					if _, ok := t.str(name); ok && slices.Contains(targetKinds, kind) {
						t.fail(name, "is not used by target kind "+kind)
					}
				}
			}
			t.unknown()
		}
	}

	n.Title = f.text("title", true, maxTitleLen)
	n.Body = f.text("body", true, maxBodyLen)
	if raw, ok := f.get("payload"); ok {
		if raw[0] != '{' {
			f.typeErr("payload", "must be a JSON object")
		} else {
			n.Payload = json.RawMessage(slices.Clone(raw))
		}
	}
	n.Locale = f.text("locale", false, maxLocaleLen)
	if chans, ok := f.strings("channels"); ok {
		if len(chans) == 0 {
			f.fail("channels", "must not be empty (omit it for every channel)")
		}
		seen := map[string]bool{}
		for i, c := range chans {
			field := fmt.Sprintf("channels[%d]", i)
			switch {
			case !slices.Contains(topics.Channels, c):
				f.fail(field, "must be one of "+strings.Join(topics.Channels, ", "))
			case seen[c]:
				f.fail(field, "repeats a channel")
			}
			seen[c] = true
		}
		n.Channels = chans
	}
	n.DedupeKey = f.text("dedupeKey", false, maxIDLen)
	n.DedupeWindowMs, _ = f.integer("dedupeWindowMs", maxWindowMs)
	n.IdempotencyKey = f.text("idempotencyKey", false, maxIDLen)
	if h := r.Header.Values(headerIdemKey); len(h) > 0 {
		hk := strings.TrimSpace(h[0])
		if len(hk) >= 2 && hk[0] == '"' && hk[len(hk)-1] == '"' {
			hk = hk[1 : len(hk)-1] // the draft standard's sf-string form
		}
		field := "header:" + headerIdemKey
		switch {
		case len(h) > 1:
			f.typeErr(field, "must be given once")
		case !utf8.ValidString(hk):
			f.typeErr(field, "must be valid UTF-8")
		case hk == "":
			*f.semErrs = append(*f.semErrs, sdk.FieldError{Field: field, Message: "must not be empty"})
		case utf8.RuneCountInString(hk) > maxIDLen:
			*f.semErrs = append(*f.semErrs, sdk.FieldError{Field: field, Message: fmt.Sprintf("must be at most %d characters", maxIDLen)})
		case n.IdempotencyKey != "" && n.IdempotencyKey != hk:
			f.fail("idempotencyKey", "differs from the Idempotency-Key header")
		default:
			n.IdempotencyKey = hk
		}
	}
	if raw, ok := f.get("key"); ok {
		if raw[0] != '{' {
			f.typeErr("key", "must be a JSON object of string or number values")
		} else if k, err := identity.ParseKey(string(raw)); err != nil {
			f.typeErr("key", strings.TrimPrefix(err.Error(), "identity: key: "))
		} else {
			n.Key = k
		}
	}
	f.unknown()
	if prob := f.problem(); prob != nil {
		return nil, prob
	}

	if targetDevice != "" {
		if !s.rep.ready.Load() {
			return nil, unavailable("the device index is still loading; retry shortly", 1)
		}
		owner, prob := s.deviceOwner(p.tenant, targetUser, targetDevice)
		if prob != nil {
			return nil, prob
		}
		recipients = []string{owner}
	}
	switch kind {
	case sdk.TargetTag:
		recipients = []string{routestage.GroupRecipient(routestage.Group{Kind: routestage.GroupTag, Name: targetTag})}
	case sdk.TargetSegment:
		recipients = []string{routestage.GroupRecipient(routestage.Group{Kind: routestage.GroupSegment, Name: targetSegment})}
	case sdk.TargetAll:
		recipients = []string{routestage.GroupRecipient(routestage.Group{Kind: routestage.GroupAll})}
	}
	return &send{n: n, recipients: recipients, targetDevice: targetDevice}, nil
}

// reservedRecipient refuses, as a user id, the form a group target's
// recipient takes (routestage.GroupRecipient: "@all", "@tag:…",
// "@segment:…"): the route stage would fan such a notification out to the
// group.
func reservedRecipient(f *fields, field, id string) {
	if routestage.IsGroupRecipient(id) {
		f.fail(field, "is reserved for group targets (@all, @tag:…, @segment:…); send to a group with target")
	}
}

// deviceOwner is the user a device target reaches: userId's device, or,
// without userId, the one user of the tenant with a device of that id. A
// device id two users registered is a 422 asking for target.userId, never
// a guess.
func (s *Server) deviceOwner(tenant, user, device string) (string, *problem) {
	if user != "" {
		if _, ok := s.rep.device(tenant, user, device); !ok {
			return "", invalid("no such device", sdk.FieldError{Field: "target.deviceId", Message: "user " + user + " has no such device"})
		}
		return user, nil
	}
	switch owners := s.rep.deviceOwners(tenant, device); len(owners) {
	case 0:
		return "", invalid("no such device", sdk.FieldError{Field: "target.deviceId", Message: "no such device"})
	case 1:
		return owners[0], nil
	default:
		return "", invalid("the device id is registered by more than one user: name the user",
			sdk.FieldError{Field: "target.userId", Message: fmt.Sprintf("required: %d users have a device %q", len(owners), device)})
	}
}

// targetKinds are the kinds of target a send may name.
var targetKinds = []string{sdk.TargetUser, sdk.TargetDevice, sdk.TargetTag, sdk.TargetSegment, sdk.TargetAll}

// readSend reads and validates a send body, answering the problem when
// there is one.
func (s *Server) readSend(w http.ResponseWriter, r *http.Request, p principal) (*send, bool) {
	body, prob := readJSON(w, r, s.cfg.MaxBodyBytes)
	if prob == nil {
		var snd *send
		if snd, prob = s.parseSend(body, r, p); prob == nil {
			return snd, true
		}
	}
	writeProblem(w, prob)
	return nil, false
}

// preferWait reads "Prefer: wait=N" (RFC 7240), N in seconds (delta-seconds:
// digits only); other preferences and malformed values are ignored, as the
// RFC asks. A wait longer than a time.Duration holds, digits too many for
// an int64 included, is the longest Duration, which the caller's cap
// (MaxWait) brings down.
func preferWait(h http.Header) time.Duration {
	for _, v := range h.Values("Prefer") {
		for _, pref := range strings.Split(v, ",") {
			name, val, ok := strings.Cut(strings.TrimSpace(strings.SplitN(pref, ";", 2)[0]), "=")
			if !ok || !strings.EqualFold(strings.TrimSpace(name), "wait") {
				continue
			}
			n, err := strconv.ParseUint(strings.Trim(strings.TrimSpace(val), `"`), 10, 64)
			if errors.Is(err, strconv.ErrRange) || (err == nil && n > math.MaxInt64/uint64(time.Second)) {
				return math.MaxInt64
			}
			if err == nil && n > 0 {
				return time.Duration(n) * time.Second
			}
		}
	}
	return 0
}

func (s *Server) requests(snd *send, p principal, now time.Time) ([]schemas.Request, *problem) {
	reqs, err := snd.n.Requests(snd.recipients, sdk.RequestOptions{Tenant: p.tenant, Producer: p.name, Source: "api", Now: now})
	if err != nil {
		return nil, invalid(err.Error())
	}
	return reqs, nil
}

// requestRecord encodes one request for herald.requests, keyed by its
// notification id. A request whose caller waits names this instance's
// reply partition (internal/reply): the stages answer there.
func (s *Server) requestRecord(rq schemas.Request, targetDevice string, now time.Time, waits bool) (*kgo.Record, error) {
	rq.TargetDevice = targetDevice
	rq.Schema = s.cfg.RequestFormat.RequestSchema()
	b, err := schemas.Encode(rq)
	if err != nil {
		return nil, err
	}
	hs := []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(rq.Schema)}}
	if waits {
		hs = reply.AppendHeader(hs, s.replyPartition)
	}
	return &kgo.Record{Topic: s.requestsT, Key: []byte(rq.NotificationID), Value: b, Timestamp: now, Headers: hs}, nil
}

func (s *Server) postNotifications(w http.ResponseWriter, r *http.Request, p principal) {
	snd, ok := s.readSend(w, r, p)
	if !ok {
		return
	}
	if !s.running() {
		writeProblem(w, unavailable("the server is not connected to Kafka", 1))
		return
	}
	now := s.cfg.Now()
	reqs, prob := s.requests(snd, p, now)
	if prob != nil {
		writeProblem(w, prob)
		return
	}
	if prob := s.checkQuota(reqs, p, now); prob != nil {
		writeProblem(w, prob)
		return
	}
	wait := min(preferWait(r.Header), s.cfg.MaxWait)
	withRoute := wait > 0 && s.cfg.WaitForRoute
	if snd.n.IdempotencyKey != "" {
		// The authoritative replay/conflict check is the dedupe stage's
		// decision: wait for it (bounded) to answer as the original did.
		wait = max(wait, s.cfg.IdempotencyWait)
	}
	recs := make([]*kgo.Record, len(reqs))
	ids := make([]string, len(reqs))
	for i, rq := range reqs {
		rec, err := s.requestRecord(rq, snd.targetDevice, now, wait > 0)
		if err != nil {
			writeProblem(w, invalid(err.Error()))
			return
		}
		recs[i], ids[i] = rec, rq.NotificationID
	}
	requestID := reqs[0].RequestID

	var wt *waiter
	if wait > 0 {
		wt = s.tr.expect(requestID, ids, withRoute)
	}
	if err := s.w.write(r.Context(), recs); err != nil {
		if wt != nil {
			s.tr.forget(requestID)
		}
		detail := "the notifications were not written; retry"
		if errors.Is(err, errCommitUnknown) {
			detail = "the write's outcome is unknown; retry with the same Idempotency-Key"
		}
		s.log.Warn("send failed", "tenant", p.tenant, "request_id", requestID, "records", len(recs), "err", err)
		writeProblem(w, unavailable(detail, 1))
		return
	}
	var got, routed map[string]schemas.Decision
	if wt != nil {
		start := time.Now()
		var complete bool
		got, complete = s.tr.wait(r.Context(), requestID, wt, wait)
		routed = s.tr.routedOf(wt)
		if complete {
			s.waitedComplete.ObserveSince(start)
		} else {
			s.waitedIncomplete.ObserveSince(start)
		}
		if s.cfg.WaitForRoute {
			// A replay answers its original's deliveries (replays.go).
			if routed == nil {
				routed = map[string]schemas.Decision{}
			}
			s.replayRoutes(r.Context(), p.tenant, got, routed, start.Add(min(wait, replayRouteWait)))
		}
	}
	if s.tr.ownOnly {
		// The bounded cache of this instance's own sends (see history.go).
		for i, rec := range recs {
			s.tr.placeOwn(p.tenant, ids[i], now.UnixMilli(), rec.Value)
		}
	}
	s.log.Debug("send written", "tenant", p.tenant, "request_id", requestID, "notifications", len(reqs), "decided", len(got))
	s.answerSend(w, reqs, requestID, got, routed)
}

// answerSend builds the answer from the decisions received. An idempotent
// replay is answered from the replay decisions alone (the original call's
// request id and each notification's original outcome), which is what the
// original call answered from its dedupe decisions; ids are derived from
// the body, so they are the same too. The route stage never sees a replay,
// so its answer has none of the deliveries and route skips the original
// may have listed.
func (s *Server) answerSend(w http.ResponseWriter, reqs []schemas.Request, requestID string, got, routed map[string]schemas.Decision) {
	statuses := make([]sdk.NotificationStatus, len(reqs))
	replays, conflict := 0, false
	orig, sameOrig := "", true
	for i, rq := range reqs {
		st := sdk.StatusPending
		if d, ok := got[rq.NotificationID]; ok {
			st = d.Outcome
			switch d.Outcome {
			case schemas.DecisionIdempotentReplay:
				st = d.OriginalOutcome
				if st == "" {
					st = schemas.DecisionAccepted
				}
				replays++
				if orig == "" {
					orig = d.OriginalRequestID
				} else if orig != d.OriginalRequestID {
					sameOrig = false
				}
			case schemas.DecisionIdempotencyConflict:
				conflict = true
				orig = d.OriginalRequestID
			}
		}
		statuses[i] = sdk.NotificationStatus{ID: rq.NotificationID, Recipient: rq.Recipient, Status: st}
	}
	if conflict {
		p := newProblem(http.StatusUnprocessableEntity, probConflict, "Idempotency key reused with a different body",
			"this Idempotency-Key was first used with a different body; nothing was sent for the conflicting notifications",
			sdk.FieldError{Field: "idempotencyKey", Message: "already used with a different body"})
		p.OriginalRequestID, p.Notifications = orig, statuses
		writeProblem(w, p)
		return
	}
	res := sdk.SendResult{RequestID: requestID, Notifications: statuses, Deliveries: []sdk.Delivery{}, Skipped: []sdk.Skipped{}}
	if replays == len(reqs) && sameOrig && orig != "" {
		res.RequestID = orig
		w.Header().Set(headerReplayed, "true")
	}
	for _, st := range statuses {
		if st.Status != sdk.StatusPending && st.Status != schemas.DecisionAccepted {
			res.Skipped = append(res.Skipped, sdk.Skipped{NotificationID: st.ID, Recipient: st.Recipient, Reason: st.Status})
		}
		rd, ok := routed[st.ID]
		if !ok {
			continue
		}
		for _, d := range rd.Deliveries {
			res.Deliveries = append(res.Deliveries, sdk.Delivery{NotificationID: st.ID, DeliveryID: d.DeliveryID, DeviceID: d.DeviceID,
				Channel: d.Channel, Status: d.State})
		}
		switch rd.Outcome {
		case schemas.DecisionRateLimited, schemas.DecisionDigested, schemas.DecisionOptedOut:
			res.Skipped = append(res.Skipped, sdk.Skipped{NotificationID: st.ID, Recipient: st.Recipient, Reason: rd.Outcome})
		case schemas.DecisionNoTarget, schemas.DecisionRejected:
			// no_target without the fallback; a group that reaches no one,
			// or more members than the route stage fans out to.
			if len(rd.Deliveries) == 0 {
				res.Skipped = append(res.Skipped, sdk.Skipped{NotificationID: st.ID, Recipient: st.Recipient, Reason: rd.Outcome})
			}
		}
	}
	if len(reqs) == 1 {
		w.Header().Set("Location", "/v1/notifications/"+reqs[0].NotificationID)
	}
	writeJSON(w, http.StatusAccepted, res)
}

// explainOne is the dedupe decision the seen-set replica (kept only with
// a quota) gives one request: what checkQuota counts. Explain itself asks
// the stages (explainByStage).
func (s *Server) explainOne(rq schemas.Request, now time.Time) schemas.Decision {
	return s.rep.seen.Decide(s.cfg.Policy, rq, now.UnixMilli(), dedupe.Source{Topic: "explain", Partition: -1, Offset: -1}).Decision
}

// explainFrom is the explanation of one request from the dedupe decision
// it would get and, when that is accepted and the route stage answered,
// the route stage's decision about it.
func explainFrom(rq schemas.Request, d schemas.Decision, rd *schemas.Decision) sdk.ExplainedNotification {
	e := sdk.ExplainedNotification{
		ID: rq.NotificationID, Recipient: rq.Recipient, IDSource: rq.IDSource, Outcome: d.Outcome,
		WouldDeduplicate:  d.Outcome == schemas.DecisionDuplicate,
		WouldReplay:       d.Outcome == schemas.DecisionIdempotentReplay,
		WouldConflict:     d.Outcome == schemas.DecisionIdempotencyConflict,
		OriginalRequestID: d.OriginalRequestID, OriginalNotificationID: d.OriginalNotificationID, OriginalAt: d.OriginalAt,
	}
	if rd == nil {
		return e
	}
	e.RouteOutcome, e.RouteDetail = rd.Outcome, rd.Detail
	e.WouldRateLimit = rd.Outcome == schemas.DecisionRateLimited
	e.WouldDigest = rd.Outcome == schemas.DecisionDigested
	if chain, ok := routestage.ChainOf(rd.Detail); ok {
		e.Fallback = explainChain(chain, rd.Deliveries)
		e.WouldFallback = len(e.Fallback) > 0
	}
	for _, dl := range rd.Deliveries {
		if dl.State == schemas.DeliveryFallback {
			continue // a later step's (e.Fallback)
		}
		if dl.State == schemas.DeliveryDeferred {
			e.WouldDefer = true
			e.DeferUntil = max(e.DeferUntil, dl.NotBefore)
		}
		if !slices.Contains(e.Channels, dl.Channel) {
			e.Channels = append(e.Channels, dl.Channel)
		}
		if dl.Channel != routestage.FeedChannel {
			e.Devices = append(e.Devices, sdk.ExplainedDevice{Channel: dl.Channel, DeviceID: dl.DeviceID})
		}
	}
	return e
}

// explainChain is the later steps of a route decision's fallback chain,
// with the devices each would reach (its deliveries in state fallback).
func explainChain(chain routestage.Chain, ds []schemas.DecisionDelivery) []sdk.ExplainedFallbackStep {
	var out []sdk.ExplainedFallbackStep
	for i, st := range chain[1:] {
		es := sdk.ExplainedFallbackStep{Step: i + 2, Channels: st.Channels, When: st.String()}
		for _, dl := range ds {
			if dl.State == schemas.DeliveryFallback && slices.Contains(st.Channels, dl.Channel) && dl.Channel != routestage.FeedChannel {
				es.Devices = append(es.Devices, sdk.ExplainedDevice{Channel: dl.Channel, DeviceID: dl.DeviceID})
			}
		}
		out = append(out, es)
	}
	return out
}

// explainByStage asks the stages how they would decide reqs: each is
// written to herald.requests as an explain (reply.ExplainHeader) naming
// this instance's reply partition, without a transaction. The dedupe
// stage, the owner of the seen-set, answers its decision and changes
// nothing; with WaitForRoute, it hands an explain it would accept to the
// route stage (reply.ExplainRoute), which answers what it would decide
// over its state, changing nothing. Each stage reads its partition in
// order, so the answers reflect every send appended before them, this
// instance's own included (read-your-writes). It waits at most
// IdempotencyWait; answers that do not all come in time are a 503.
func (s *Server) explainByStage(ctx context.Context, reqs []schemas.Request, targetDevice string, now time.Time) (got, routed map[string]schemas.Decision, prob *problem) {
	mark := kgo.RecordHeader{Key: reply.ExplainHeader, Value: []byte("1")}
	if s.cfg.WaitForRoute {
		mark = reply.ExplainRouteHeader()
	}
	recs := make([]*kgo.Record, len(reqs))
	ids := make([]string, len(reqs))
	for i, rq := range reqs {
		rec, err := s.requestRecord(rq, targetDevice, now, true)
		if err != nil {
			return nil, nil, invalid(err.Error())
		}
		rec.Headers = append(rec.Headers, mark)
		recs[i], ids[i] = rec, rq.NotificationID
	}
	requestID := reqs[0].RequestID
	wt := s.tr.expect(requestID, ids, s.cfg.WaitForRoute)
	wt.explain = true
	if err := s.w.writePlain(ctx, recs); err != nil {
		s.tr.forget(requestID)
		s.log.Warn("explain not written", "request_id", requestID, "err", err)
		return nil, nil, unavailable("the explain could not be written to Kafka; retry", 1)
	}
	got, complete := s.tr.wait(ctx, requestID, wt, s.cfg.IdempotencyWait)
	if !complete {
		return nil, nil, unavailable("the stages did not answer the explain in time; retry", 1)
	}
	return got, s.tr.routedOf(wt), nil
}

// checkQuota refuses a send that would take the tenant over its quota of
// accepted notifications, counting only the notifications the replica says
// would be accepted: a duplicate or a replay never counts and is never
// refused. Both counts are eventually consistent.
func (s *Server) checkQuota(reqs []schemas.Request, p principal, now time.Time) *problem {
	if s.cfg.QuotaPerWindow <= 0 {
		return nil
	}
	used, end := s.tr.acceptedIn(p.tenant, now.UnixMilli())
	if used < s.cfg.QuotaPerWindow {
		return nil
	}
	fresh := 0
	for _, rq := range reqs {
		if s.explainOne(rq, now).Outcome == schemas.DecisionAccepted {
			fresh++
		}
	}
	if fresh == 0 {
		return nil
	}
	retry := int((end - now.UnixMilli() + 999) / 1000)
	prob := newProblem(http.StatusTooManyRequests, problemBase+"quota-exceeded", "Quota exceeded",
		fmt.Sprintf("this tenant may have %d accepted notifications per %s", s.cfg.QuotaPerWindow, s.cfg.QuotaWindow))
	prob.retryAfter = max(retry, 1)
	return prob
}

func (s *Server) postExplain(w http.ResponseWriter, r *http.Request, p principal) {
	snd, ok := s.readSend(w, r, p)
	if !ok {
		return
	}
	if !s.running() || !s.rep.ready.Load() {
		writeProblem(w, unavailable("the device and route state replica is still loading; retry shortly", 1))
		return
	}
	now := s.cfg.Now()
	reqs, prob := s.requests(snd, p, now)
	if prob != nil {
		writeProblem(w, prob)
		return
	}
	got, routed, prob := s.explainByStage(r.Context(), reqs, snd.targetDevice, now)
	if prob != nil {
		writeProblem(w, prob)
		return
	}
	ex := sdk.Explanation{Consistency: ConsistencyReadYourWrites, Notifications: make([]sdk.ExplainedNotification, len(reqs))}
	for i, rq := range reqs {
		var rd *schemas.Decision
		if d, ok := routed[rq.NotificationID]; ok {
			rd = &d
		}
		e := explainFrom(rq, got[rq.NotificationID], rd)
		ex.Notifications[i] = e
		ex.WouldDeduplicate = ex.WouldDeduplicate || e.WouldDeduplicate
		ex.WouldReplay = ex.WouldReplay || e.WouldReplay
		ex.WouldConflict = ex.WouldConflict || e.WouldConflict
		ex.WouldRateLimit = ex.WouldRateLimit || e.WouldRateLimit
		ex.WouldDigest = ex.WouldDigest || e.WouldDigest
		ex.WouldDefer = ex.WouldDefer || e.WouldDefer
		ex.WouldFallback = ex.WouldFallback || e.WouldFallback
	}
	writeJSON(w, http.StatusOK, ex)
}

func (s *Server) getNotification(w http.ResponseWriter, r *http.Request, p principal) {
	id := r.PathValue("id")
	if !identity.Valid(id) {
		writeProblem(w, notFound("notification"))
		return
	}
	if s.cfg.historyFromAudit() {
		rec, ok, err := s.auditRecord(r.Context(), p.tenant, id)
		if err != nil {
			// The cache may still know it; else the audit's failure is the answer.
			if rec, ok := s.tr.record(p.tenant, id); ok {
				writeJSON(w, http.StatusOK, rec)
				return
			}
			s.dashboardFailed(w, r, err)
			return
		}
		if ok {
			writeJSON(w, http.StatusOK, rec)
			return
		}
	}
	rec, ok := s.tr.record(p.tenant, id)
	if !ok {
		writeProblem(w, notFound("notification"))
		return
	}
	writeJSON(w, http.StatusOK, rec)
}
