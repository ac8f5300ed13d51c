package sdk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/internal/backoff"
)

// Client calls herald's HTTP API. Its zero value is not usable: set BaseURL
// and APIKey (or use NewClient).
type Client struct {
	// BaseURL is the API's root, e.g. "http://127.0.0.1:8080".
	BaseURL string
	// APIKey is sent as "Authorization: Bearer <APIKey>".
	APIKey string
	// HTTPClient sends the requests; http.DefaultClient when nil.
	HTTPClient *http.Client
	// MaxAttempts bounds the tries of one call (4 by default).
	MaxAttempts int
	// AttemptTimeout bounds each try (30 s by default); a try that times
	// out is retried.
	AttemptTimeout time.Duration
	// MinBackoff and MaxBackoff bound the delay between tries (200 ms and
	// 10 s by default): the n-th retry waits a random time up to
	// min(MaxBackoff, MinBackoff·2ⁿ) (full jitter), or what Retry-After
	// asks when that is longer.
	MinBackoff, MaxBackoff time.Duration
}

// NewClient returns a client with the default retry policy.
func NewClient(baseURL, apiKey string) *Client {
	return &Client{BaseURL: strings.TrimRight(baseURL, "/"), APIKey: apiKey}
}

// APIError is an answer other than 2xx: the status and its problem body.
type APIError struct {
	StatusCode int
	Problem    Problem
	// RetryAfter is the server's Retry-After, when it sent one.
	RetryAfter time.Duration
}

func (e *APIError) Error() string {
	if e.Problem.Detail != "" {
		return fmt.Sprintf("herald: %d %s: %s", e.StatusCode, e.Problem.Title, e.Problem.Detail)
	}
	return fmt.Sprintf("herald: %d %s", e.StatusCode, http.StatusText(e.StatusCode))
}

// Temporary reports whether retrying the same call may succeed.
func (e *APIError) Temporary() bool {
	return e.StatusCode >= 500 || e.StatusCode == http.StatusTooManyRequests || e.StatusCode == http.StatusRequestTimeout
}

// Send sends one logical notification. When n.IdempotencyKey is empty,
// Send derives one for this call (a fresh random id) and sends it, as the
// Idempotency-Key header, on every attempt: however many times a transient
// failure makes it retry, herald makes the notifications once, and a retry
// is answered as the first attempt was. The exception is a notification
// with a Key and no DedupeKey: an idempotency key would replace its
// canonical id (NotificationID of type, recipient and key; see DeriveID),
// so Send sends none, and a retry is caught by herald's deduplication on
// that id (answered duplicate).
func (c *Client) Send(ctx context.Context, n Notification) (*SendResult, error) {
	if n.IdempotencyKey == "" && (n.Key == nil || n.DedupeKey != "") {
		n.IdempotencyKey = identity.NewRandomID()
	}
	var hdr http.Header
	if n.IdempotencyKey != "" {
		hdr = http.Header{"Idempotency-Key": {n.IdempotencyKey}}
	}
	body, err := json.Marshal(n)
	if err != nil {
		return nil, fmt.Errorf("herald: encode notification: %w", err)
	}
	var res SendResult
	answer, err := c.do(ctx, http.MethodPost, "/v1/notifications", body, hdr, &res)
	if err != nil {
		return nil, err
	}
	res.Replayed = answer.Get("Idempotency-Replayed") == "true"
	return &res, nil
}

// Explain asks what herald would decide for n now, changing nothing.
func (c *Client) Explain(ctx context.Context, n Notification) (*Explanation, error) {
	body, err := json.Marshal(n)
	if err != nil {
		return nil, fmt.Errorf("herald: encode notification: %w", err)
	}
	var ex Explanation
	if _, err := c.do(ctx, http.MethodPost, "/v1/explain", body, nil, &ex); err != nil {
		return nil, err
	}
	return &ex, nil
}

// Notification returns one notification's record and timeline.
func (c *Client) Notification(ctx context.Context, id string) (*NotificationRecord, error) {
	var rec NotificationRecord
	if _, err := c.do(ctx, http.MethodGet, "/v1/notifications/"+url.PathEscape(id), nil, nil, &rec); err != nil {
		return nil, err
	}
	return &rec, nil
}

// RegisterDevice registers a user's device or rotates its token.
func (c *Client) RegisterDevice(ctx context.Context, userID, deviceID string, reg DeviceRegistration) (*Device, error) {
	body, err := json.Marshal(reg)
	if err != nil {
		return nil, fmt.Errorf("herald: encode device: %w", err)
	}
	var d Device
	if _, err := c.do(ctx, http.MethodPut, devicePath(userID, deviceID), body, nil, &d); err != nil {
		return nil, err
	}
	return &d, nil
}

// DeleteDevice removes a user's device.
func (c *Client) DeleteDevice(ctx context.Context, userID, deviceID string) error {
	_, err := c.do(ctx, http.MethodDelete, devicePath(userID, deviceID), nil, nil, nil)
	return err
}

// SetPreferences replaces a user's preferences.
func (c *Client) SetPreferences(ctx context.Context, userID string, p PreferencesUpdate) (*Preferences, error) {
	body, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("herald: encode preferences: %w", err)
	}
	var out Preferences
	if _, err := c.do(ctx, http.MethodPut, "/v1/users/"+url.PathEscape(userID)+"/preferences", body, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// SetSegment replaces the members of a segment (target kind segment).
func (c *Client) SetSegment(ctx context.Context, name string, members []string) (*Segment, error) {
	if members == nil {
		members = []string{}
	}
	body, err := json.Marshal(SegmentUpdate{Members: members})
	if err != nil {
		return nil, fmt.Errorf("herald: encode segment: %w", err)
	}
	var out Segment
	if _, err := c.do(ctx, http.MethodPut, "/v1/segments/"+url.PathEscape(name), body, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteSegment removes a segment.
func (c *Client) DeleteSegment(ctx context.Context, name string) error {
	_, err := c.do(ctx, http.MethodDelete, "/v1/segments/"+url.PathEscape(name), nil, nil, nil)
	return err
}

// SetWebhook registers an outbound webhook endpoint or replaces it
// (idempotent; without a secret herald makes one, and an existing endpoint
// keeps its own).
func (c *Client) SetWebhook(ctx context.Context, id string, w WebhookUpdate) (*Webhook, error) {
	body, err := json.Marshal(w)
	if err != nil {
		return nil, fmt.Errorf("herald: encode webhook: %w", err)
	}
	var out Webhook
	if _, err := c.do(ctx, http.MethodPut, "/v1/webhooks/"+url.PathEscape(id), body, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Webhooks lists the tenant's outbound webhook endpoints.
func (c *Client) Webhooks(ctx context.Context) ([]Webhook, error) {
	var out WebhookList
	if _, err := c.do(ctx, http.MethodGet, "/v1/webhooks", nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Webhooks, nil
}

// DeleteWebhook removes an outbound webhook endpoint.
func (c *Client) DeleteWebhook(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodDelete, "/v1/webhooks/"+url.PathEscape(id), nil, nil, nil)
	return err
}

func devicePath(userID, deviceID string) string {
	return "/v1/users/" + url.PathEscape(userID) + "/devices/" + url.PathEscape(deviceID)
}

// do runs one call with retries. Every attempt sends the same body and
// headers. Only transient failures are retried: transport errors and
// timeouts, 5xx, 408 and 429.
func (c *Client) do(ctx context.Context, method, path string, body []byte, hdr http.Header, out any) (http.Header, error) {
	attempts := c.MaxAttempts
	if attempts <= 0 {
		attempts = 4
	}
	var last error
	for attempt := 0; attempt < attempts; attempt++ {
		if attempt > 0 {
			var ra time.Duration
			var ae *APIError
			if errors.As(last, &ae) {
				ra = ae.RetryAfter
			}
			if err := backoff.Sleep(ctx, c.backoff(attempt, ra)); err != nil {
				return nil, fmt.Errorf("herald: %s %s: %w (last error: %w)", method, path, err, last)
			}
		}
		h, err := c.once(ctx, method, path, body, hdr, out)
		if err == nil {
			return h, nil
		}
		last = err
		var ae *APIError
		if errors.As(err, &ae) && !ae.Temporary() {
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("herald: %s %s: gave up after %d attempts: %w", method, path, attempts, last)
}

func (c *Client) once(ctx context.Context, method, path string, body []byte, hdr http.Header, out any) (http.Header, error) {
	timeout := c.AttemptTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(actx, method, strings.TrimRight(c.BaseURL, "/")+path, rd)
	if err != nil {
		return nil, fmt.Errorf("herald: %s %s: %w", method, path, err)
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	req.Header.Set("Authorization", "Bearer "+c.APIKey)
	req.Header.Set("Accept", "application/json, application/problem+json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	hc := c.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("herald: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("herald: %s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode >= 300 {
		ae := &APIError{StatusCode: resp.StatusCode}
		_ = json.Unmarshal(b, &ae.Problem) // a non-problem body leaves it empty
		if s := resp.Header.Get("Retry-After"); s != "" {
			if n, err := strconv.Atoi(s); err == nil && n >= 0 {
				ae.RetryAfter = time.Duration(n) * time.Second
			} else if t, err := http.ParseTime(s); err == nil {
				ae.RetryAfter = max(time.Until(t), 0)
			}
		}
		return nil, ae
	}
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			return nil, fmt.Errorf("herald: %s %s: decode answer: %w", method, path, err)
		}
	}
	return resp.Header, nil
}

// backoff is the wait before retry n (1-based): full jitter over an
// exponentially growing cap, but never less than retryAfter.
func (c *Client) backoff(n int, retryAfter time.Duration) time.Duration {
	return backoff.Policy{Min: c.MinBackoff, Max: c.MaxBackoff}.Delay(n, retryAfter)
}
