package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sdk"
	"github.com/heraldhq/herald/sinks/webhook"
)

// webhookPath reads {webhookId}, answering the problem when it is bad.
func webhookPath(w http.ResponseWriter, r *http.Request) (string, bool) {
	id, prob := pathID(r, "webhookId")
	if prob != nil {
		writeProblem(w, prob)
		return "", false
	}
	return id, true
}

// webhookOut is an endpoint as answered: without its signing secret,
// which only the answer creating the endpoint shows (withSecret).
func webhookOut(wh schemas.Webhook, withSecret bool) sdk.Webhook {
	out := sdk.Webhook{ID: wh.ID, URL: wh.URL, Events: wh.Events, Enabled: wh.Enabled,
		DisabledReason: wh.DisabledReason, CreatedAt: wh.CreatedAt, UpdatedAt: wh.UpdatedAt}
	if withSecret {
		out.Secret = wh.Secret
	}
	return out
}

// resolveTimeout bounds the registration check's DNS lookup.
const resolveTimeout = 3 * time.Second

func (s *Server) listWebhooks(w http.ResponseWriter, _ *http.Request, p principal) {
	if !s.replicaReady(w) {
		return
	}
	out := sdk.WebhookList{Webhooks: []sdk.Webhook{}}
	for _, wh := range s.rep.tenantWebhooks(p.tenant) {
		out.Webhooks = append(out.Webhooks, webhookOut(wh, false))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getWebhook(w http.ResponseWriter, r *http.Request, p principal) {
	id, ok := webhookPath(w, r)
	if !ok || !s.replicaReady(w) {
		return
	}
	wh, found := s.rep.webhook(p.tenant, id)
	if !found {
		writeProblem(w, notFound("webhook"))
		return
	}
	writeJSON(w, http.StatusOK, webhookOut(wh, false))
}

// putWebhook registers an endpoint (201) or replaces it (200). Without a
// secret in the body a new endpoint gets a fresh one and an existing one
// keeps its own, so the same PUT repeated leaves the endpoint as it was:
// idempotent. Re-enabling an endpoint herald disabled (410) clears the
// reason. Only the 201 shows the secret (no GET does): a client that lost
// that answer sets a secret of its own with another PUT. Without
// AllowPrivateWebhooks a URL that is, or resolves to, a private, loopback
// or link-local address is refused (422, field url); the sink checks
// again on every connection.
func (s *Server) putWebhook(w http.ResponseWriter, r *http.Request, p principal) {
	id, ok := webhookPath(w, r)
	if !ok {
		return
	}
	f, ok := s.readObject(w, r)
	if !ok {
		return
	}
	wh := schemas.Webhook{Tenant: p.tenant, ID: id, Enabled: true}
	wh.URL = f.text("url", true, 2048)
	if wh.URL != "" {
		u, err := url.Parse(wh.URL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Hostname() == "" {
			f.fail("url", "must be an absolute http or https URL")
		} else if u.User != nil {
			f.fail("url", "must not carry a user name or password")
		} else if !s.cfg.AllowPrivateWebhooks {
			ctx, cancel := context.WithTimeout(r.Context(), resolveTimeout)
			err := webhook.CheckURL(ctx, s.cfg.Resolver, wh.URL)
			cancel()
			if errors.Is(err, webhook.ErrForbiddenAddress) {
				f.fail("url", "must reach a public address: "+strings.TrimPrefix(err.Error(), "webhook: ")+
					"; herald refuses internal addresses unless the api and the webhook sink run with --webhook-allow-private")
			}
		}
	}
	events, ok := f.strings("events")
	switch {
	case ok && len(events) == 0:
		f.fail("events", "must name at least one event")
	case ok:
		at := map[string]int{}
		for i, ev := range events {
			field := fmt.Sprintf("events[%d]", i)
			if j, dup := at[ev]; dup {
				f.fail(field, fmt.Sprintf("repeats events[%d]", j))
			} else if !slices.Contains(schemas.WebhookEvents, ev) {
				f.fail(field, "must be one of "+strings.Join(schemas.WebhookEvents, ", "))
			}
			at[ev] = i
		}
		wh.Events = events
	case !f.has("events"):
		f.fail("events", "is required")
	}
	wh.Secret = f.text("secret", false, 128)
	if wh.Secret != "" {
		if _, err := webhook.SecretKey(wh.Secret); err != nil {
			f.fail("secret", fmt.Sprintf("must be whsec_ and the standard base64 of %d to %d bytes", webhook.MinSecretBytes, webhook.MaxSecretBytes))
		}
	}
	if en, ok := f.boolean("enabled"); ok {
		wh.Enabled = en
	}
	f.unknown()
	if prob := f.problem(); prob != nil {
		writeProblem(w, prob)
		return
	}
	if !s.replicaReady(w) {
		return
	}
	now := time.Now().UnixMilli()
	wh.CreatedAt, wh.UpdatedAt = now, now
	status := http.StatusCreated
	if old, found := s.rep.webhook(p.tenant, id); found {
		status, wh.CreatedAt = http.StatusOK, old.CreatedAt
		if wh.Secret == "" {
			wh.Secret = old.Secret
		}
		if !wh.Enabled && !old.Enabled {
			wh.DisabledReason = old.DisabledReason
		}
		if old.URL == wh.URL && old.Secret == wh.Secret && slices.Equal(old.Events, wh.Events) && old.Enabled == wh.Enabled {
			writeJSON(w, status, webhookOut(old, false)) // a repeat: nothing to write
			return
		}
	}
	if wh.Secret == "" {
		wh.Secret = webhook.NewSecret()
	}
	key := webhook.Key(p.tenant, id)
	if !s.put(w, r, s.webhooksT, key, &wh) {
		return
	}
	s.rep.putWebhook(key, &wh)
	writeJSON(w, status, webhookOut(wh, status == http.StatusCreated))
}

func (s *Server) deleteWebhook(w http.ResponseWriter, r *http.Request, p principal) {
	id, ok := webhookPath(w, r)
	if !ok || !s.replicaReady(w) {
		return
	}
	if _, found := s.rep.webhook(p.tenant, id); !found {
		writeProblem(w, notFound("webhook"))
		return
	}
	key := webhook.Key(p.tenant, id)
	if !s.put(w, r, s.webhooksT, key, nil) {
		return
	}
	s.rep.putWebhook(key, nil)
	w.WriteHeader(http.StatusNoContent)
}
