package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/sdk"
	"github.com/heraldhq/herald/topics"
)

const (
	keyA = "key-of-tenant-a"
	keyB = "key-of-tenant-b"
)

func testKeys() []APIKey {
	keys, err := ParseKeys(strings.NewReader(fmt.Sprintf("# test keys\nta:svc-a:%s\ntb:svc-b:%s\n", HashKey(keyA), HashKey(keyB))))
	if err != nil {
		panic(err)
	}
	return keys
}

// unstarted is a server that never connects to Kafka: everything up to the
// write is real.
func unstarted(t *testing.T, mod func(*Config)) *Server {
	t.Helper()
	cfg := Config{Brokers: []string{"127.0.0.1:1"}, Catalog: topics.New(topics.Options{}), Keys: testKeys(), MaxRecipients: 3, MaxBodyBytes: 2048, Logger: slog.New(slog.DiscardHandler)}
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func do(t *testing.T, h http.Handler, method, path, key string, body string, hdr ...string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	if key != "" {
		r.Header.Set("Authorization", "Bearer "+key)
	}
	if body != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func problemOf(t *testing.T, w *httptest.ResponseRecorder) sdk.Problem {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("content type %q, want application/problem+json (status %d, body %s)", ct, w.Code, w.Body)
	}
	var p sdk.Problem
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatal(err)
	}
	if p.Status != w.Code || p.Type == "" || p.Title == "" {
		t.Fatalf("problem %+v does not match status %d", p, w.Code)
	}
	return p
}

func TestASendThatBreaksARuleIsRefusedNamingTheField(t *testing.T) {
	s := unstarted(t, nil)
	const ok = `"type":"invoice.paid","recipients":["u1"],"title":"Paid","body":"Thanks"`
	cases := []struct {
		name   string
		body   string
		hdr    []string
		status int
		field  string
	}{
		{"a missing title is a 422", `{"type":"t","recipients":["u1"],"body":"b"}`, nil, 422, "title"},
		{"an empty body is a 422", `{"type":"t","recipients":["u1"],"title":"x","body":""}`, nil, 422, "body"},
		{"a send without any target is a 422", `{"type":"t","title":"x","body":"b"}`, nil, 422, "target"},
		{"a send with two kinds of target is a 422", `{` + ok + `,"recipientId":"u2"}`, nil, 422, "target"},
		{"a missing type is a 422", `{"recipients":["u1"],"title":"x","body":"b"}`, nil, 422, "type"},
		{"notificationId must equal type", `{` + ok + `,"notificationId":"other"}`, nil, 422, "notificationId"},
		{"an unknown field is a 400", `{` + ok + `,"colour":"red"}`, nil, 400, "colour"},
		{"an unknown field of the target is a 400", `{"type":"t","target":{"kind":"user","userId":"u","x":1},"title":"x","body":"b"}`, nil, 400, "target.x"},
		{"a number where a string belongs is a 400", `{"type":"t","recipients":["u1"],"title":7,"body":"b"}`, nil, 400, "title"},
		{"recipients that are not an array are a 400", `{"type":"t","recipients":"u1","title":"x","body":"b"}`, nil, 400, "recipients"},
		{"a target that is not an object is a 400", `{"type":"t","target":"u1","title":"x","body":"b"}`, nil, 400, "target"},
		{"a recipient that is not a string is a 400", `{"type":"t","recipients":["u1",2],"title":"x","body":"b"}`, nil, 400, "recipients[1]"},
		{"null is a wrong type", `{` + ok + `,"locale":null}`, nil, 400, "locale"},
		{"a fractional window is a 400", `{` + ok + `,"dedupeWindowMs":1.5}`, nil, 400, "dedupeWindowMs"},
		{"a negative window is a 422", `{` + ok + `,"dedupeWindowMs":-1}`, nil, 422, "dedupeWindowMs"},
		{"more recipients than the limit is a 422", `{"type":"t","recipients":["a","b","c","d"],"title":"x","body":"b"}`, nil, 422, "recipients"},
		{"a repeated recipient is a 422", `{"type":"t","recipients":["a","b","a"],"title":"x","body":"b"}`, nil, 422, "recipients[2]"},
		{"an empty recipient is a 422", `{"type":"t","recipients":["a",""],"title":"x","body":"b"}`, nil, 422, "recipients[1]"},
		{"a recipient longer than 256 characters is a 422", `{"type":"t","recipients":["` + strings.Repeat("r", 257) + `"],"title":"x","body":"b"}`, nil, 422, "recipients[0]"},
		{"an unknown channel is a 422", `{` + ok + `,"channels":["sms"]}`, nil, 422, "channels[0]"},
		{"a payload that is not an object is a 400", `{` + ok + `,"payload":[1]}`, nil, 400, "payload"},
		{"a key with a boolean value is a 400", `{` + ok + `,"key":{"a":true}}`, nil, 400, "key"},
		{"a key named __proto__ is refused", `{` + ok + `,"key":{"__proto__":"x"}}`, nil, 400, "key"},
		{"malformed JSON is a 400 naming where it broke", `{"type":`, nil, 400, "type"},
		{"a truncated document is a 400", `{`, nil, 400, "body"},
		{"trailing data is a 400", `{` + ok + `} {}`, nil, 400, "body"},
		{"a duplicate member is a 400", `{` + ok + `,"title":"again"}`, nil, 400, "title"},
		{"a lone surrogate escape is a 400", `{"type":"t","recipients":["u\ud800"],"title":"x","body":"b"}`, nil, 400, "recipients[0]"},
		{"a lone low surrogate in a payload is a 400", `{` + ok + `,"payload":{"a":{"b":"\udc00"}}}`, nil, 400, "payload.a.b"},
		{"invalid UTF-8 is a 400", "{\"type\":\"t\xff\",\"recipients\":[\"u\"],\"title\":\"x\",\"body\":\"b\"}", nil, 400, "body"},
		{"a body over the limit is a 413", `{` + ok + `,"payload":{"pad":"` + strings.Repeat("x", 3000) + `"}}`, nil, 413, "body"},
		{"a tag target needs a tag", `{"type":"t","target":{"kind":"tag"},"title":"x","body":"b"}`, nil, 422, "target.tag"},
		{"a segment target needs a segment name", `{"type":"t","target":{"kind":"segment","segment":""},"title":"x","body":"b"}`, nil, 422, "target.segment"},
		{"an unknown target kind is a 422", `{"type":"t","target":{"kind":"everyone"},"title":"x","body":"b"}`, nil, 422, "target.kind"},
		{"a member that the target's kind does not use is a 422", `{"type":"t","target":{"kind":"all","tag":"vip"},"title":"x","body":"b"}`, nil, 422, "target.tag"},
		{"a user target with a segment is a 422", `{"type":"t","target":{"kind":"user","userId":"u","segment":"s"},"title":"x","body":"b"}`, nil, 422, "target.segment"},
		{"a tag that is not a string is a 400", `{"type":"t","target":{"kind":"tag","tag":1},"title":"x","body":"b"}`, nil, 400, "target.tag"},
		{"a user target needs a user id", `{"type":"t","target":{"kind":"user"},"title":"x","body":"b"}`, nil, 422, "target.userId"},
		{"a recipient named like a group target is a 422", `{"type":"t","recipients":["u","@all"],"title":"x","body":"b"}`, nil, 422, "recipients[1]"},
		{"a recipientId named like a segment target is a 422", `{"type":"t","recipientId":"@segment:beta","title":"x","body":"b"}`, nil, 422, "recipientId"},
		{"a user target named like a tag target is a 422", `{"type":"t","target":{"kind":"user","userId":"@tag:vip"},"title":"x","body":"b"}`, nil, 422, "target.userId"},
		{"an idempotency key differing from the header is a 422", `{` + ok + `,"idempotencyKey":"a"}`, []string{"Idempotency-Key", "b"}, 422, "idempotencyKey"},
		{"an empty Idempotency-Key header is a 422", `{` + ok + `}`, []string{"Idempotency-Key", `""`}, 422, "header:Idempotency-Key"},
		{"a body that is not JSON media is a 415", `{` + ok + `}`, []string{"Content-Type", "text/plain"}, 415, "header:Content-Type"},
		{"an empty body is a 400", ``, nil, 400, "body"},
		{"an array body is a 400", `[1]`, nil, 400, "body"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, path := range []string{"/v1/notifications", "/v1/explain"} {
				w := do(t, s, "POST", path, keyA, tc.body, tc.hdr...)
				if w.Code != tc.status {
					t.Fatalf("%s: status %d, want %d: %s", path, w.Code, tc.status, w.Body)
				}
				p := problemOf(t, w)
				if !slices.ContainsFunc(p.Errors, func(e sdk.FieldError) bool { return e.Field == tc.field }) {
					t.Fatalf("%s: errors %+v do not name %q", path, p.Errors, tc.field)
				}
			}
		})
	}
}

func TestAValidSendReachesTheWriteOnlyWhenConnected(t *testing.T) {
	s := unstarted(t, nil)
	w := do(t, s, "POST", "/v1/notifications", keyA, `{"type":"t","recipients":["u1"],"title":"x","body":"b"}`)
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Fatalf("status %d (Retry-After %q), want 503 with Retry-After: %s", w.Code, w.Header().Get("Retry-After"), w.Body)
	}
}

func TestEveryV1RouteNeedsAValidKey(t *testing.T) {
	s := unstarted(t, nil)
	for _, rt := range apiRoutes() {
		if rt.public {
			continue
		}
		path := strings.NewReplacer("{id}", "0123456789abcdef0123456789abcdef", "{userId}", "u1", "{deviceId}", "d1", "{name}", "s1").Replace(rt.pattern)
		for _, tc := range []struct{ name, auth string }{
			{"no key", ""},
			{"a wrong key", "Bearer nope"},
			{"a key in the wrong scheme", "Basic " + keyA},
			{"an empty bearer", "Bearer "},
		} {
			t.Run(rt.method+" "+rt.pattern+" refuses "+tc.name, func(t *testing.T) {
				r := httptest.NewRequest(rt.method, path, strings.NewReader(`{}`))
				if tc.auth != "" {
					r.Header.Set("Authorization", tc.auth)
				}
				w := httptest.NewRecorder()
				s.ServeHTTP(w, r)
				if w.Code != http.StatusUnauthorized || !strings.HasPrefix(w.Header().Get("WWW-Authenticate"), "Bearer") {
					t.Fatalf("status %d, want 401 with WWW-Authenticate", w.Code)
				}
				problemOf(t, w)
			})
		}
	}
}

func TestKeysAreReadFromHashesAndMatchedToTheirTenant(t *testing.T) {
	keys := testKeys()
	cases := []struct {
		name, auth, tenant string
		ok                 bool
	}{
		{"tenant a's key is tenant a", "Bearer " + keyA, "ta", true},
		{"tenant b's key is tenant b", "Bearer " + keyB, "tb", true},
		{"the scheme is case-insensitive", "bearer " + keyA, "ta", true},
		{"a prefix of a key is refused", "Bearer " + keyA[:5], "", false},
		{"the hash itself is refused", "Bearer " + HashKey(keyA), "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.Header.Set("Authorization", tc.auth)
			p, ok := authenticate(keys, r)
			if ok != tc.ok || p.tenant != tc.tenant {
				t.Fatalf("got (%q, %v), want (%q, %v)", p.tenant, ok, tc.tenant, tc.ok)
			}
		})
	}
	for _, bad := range []string{"", "# only a comment\n", "ta:svc\n", "ta:svc:zz\n", ":svc:" + HashKey("k") + "\n",
		"a:b:" + HashKey("k") + "\nc:d:" + HashKey("k") + "\n"} {
		if _, err := ParseKeys(strings.NewReader(bad)); err == nil {
			t.Errorf("ParseKeys(%q) accepted a bad file", bad)
		}
	}
}

func TestUnknownPathsAndMethodsAnswerProblems(t *testing.T) {
	s := unstarted(t, nil)
	cases := []struct {
		name, method, path string
		status             int
	}{
		{"an unknown path is a 404", "GET", "/v2/nothing", 404},
		{"a wrong method is a 405", "DELETE", "/v1/notifications", 405},
		{"a wrong method on a parameterised path is a 405", "POST", "/v1/users/u/devices", 405},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := do(t, s, tc.method, tc.path, keyA, "")
			if w.Code != tc.status {
				t.Fatalf("status %d, want %d", w.Code, tc.status)
			}
			problemOf(t, w)
			if tc.status == 405 && w.Header().Get("Allow") == "" {
				t.Fatal("405 without Allow")
			}
		})
	}
}

func TestDevicesPreferencesAndSegmentsThatBreakARuleAreRefused(t *testing.T) {
	s := unstarted(t, nil)
	const device, prefs, segment = "/v1/users/u1/devices/d1", "/v1/users/u1/preferences", "/v1/segments/s1"
	cases := []struct {
		name, path, body string
		status           int
		field            string
	}{
		{"an unknown platform is a 422", device, `{"platform":"symbian","token":"t"}`, 422, "platform"},
		{"an ios device needs a token", device, `{"platform":"ios"}`, 422, "token"},
		{"a web device needs a subscription", device, `{"platform":"web"}`, 422, "webPush"},
		{"a web subscription needs https", device, `{"platform":"web","webPush":{"endpoint":"http://x","p256dh":"k","auth":"a"}}`, 422, "webPush.endpoint"},
		{"an unknown device field is a 400", device, `{"platform":"ios","token":"t","colour":1}`, 400, "colour"},
		{"enabled must be a boolean", device, `{"platform":"ios","token":"t","enabled":"yes"}`, 400, "enabled"},
		{"a repeated tag is a 422", device, `{"platform":"ios","token":"t","tags":["vip","vip"]}`, 422, "tags[1]"},
		{"an empty tag is a 422", device, `{"platform":"ios","token":"t","tags":[""]}`, 422, "tags[0]"},
		{"tags must be strings", device, `{"platform":"ios","token":"t","tags":[7]}`, 400, "tags[0]"},
		{"more than 64 tags is a 422", device, `{"platform":"ios","token":"t","tags":[` + manyTags(65) + `]}`, 422, "tags"},
		{"a segment needs members", segment, `{}`, 422, "members"},
		{"a repeated member is a 422", segment, `{"members":["u1","u2","u1"]}`, 422, "members[2]"},
		{"an empty member is a 422", segment, `{"members":[""]}`, 422, "members[0]"},
		{"a member longer than 256 characters is a 422", segment, `{"members":["u1","` + strings.Repeat("m", 257) + `"]}`, 422, "members[1]"},
		{"members must be an array of strings", segment, `{"members":"u1"}`, 400, "members"},
		{"an unknown segment field is a 400", segment, `{"members":[],"owner":"x"}`, 400, "owner"},
		{"an unknown channel is a 400", prefs, `{"channels":{"sms":true}}`, 400, "channels.sms"},
		{"a bad quiet hour is a 422", prefs, `{"quietHours":{"start":"25:00","end":"07:00","timeZone":"Europe/Paris"}}`, 422, "quietHours.start"},
		{"quiet hours need a time zone", prefs, `{"quietHours":{"start":"22:00","end":"07:00"}}`, 422, "quietHours.timeZone"},
		{"a misspelt quiet-hours time zone is a 422", prefs, `{"quietHours":{"start":"02:00","end":"06:00","timeZone":"Asia/Tokio"}}`, 422, "quietHours.timeZone"},
		{"a quiet-hours time zone of Local (the host's) is a 422", prefs, `{"quietHours":{"start":"02:00","end":"06:00","timeZone":"Local"}}`, 422, "quietHours.timeZone"},
		{"a quiet-hours time zone that is a path is a 422", prefs, `{"quietHours":{"start":"02:00","end":"06:00","timeZone":"../etc/passwd"}}`, 422, "quietHours.timeZone"},
		{"a misspelt device time zone is a 422", device, `{"platform":"ios","token":"t","timeZone":"Europe/Pariss"}`, 422, "timeZone"},
		{"a device time zone of Local is a 422", device, `{"platform":"ios","token":"t","timeZone":"Local"}`, 422, "timeZone"},
		{"an empty device time zone is a 422", device, `{"platform":"ios","token":"t","timeZone":""}`, 422, "timeZone"},
		{"a repeated opted-out type is a 422", prefs, `{"optedOutTypes":["a","a"]}`, 422, "optedOutTypes[1]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := do(t, s, "PUT", tc.path, keyA, tc.body)
			if w.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", w.Code, tc.status, w.Body)
			}
			p := problemOf(t, w)
			if !slices.ContainsFunc(p.Errors, func(e sdk.FieldError) bool { return e.Field == tc.field }) {
				t.Fatalf("errors %+v do not name %q", p.Errors, tc.field)
			}
		})
	}
}

func TestATimeZoneThatLoadsTheSameEverywhereIsAccepted(t *testing.T) {
	s := unstarted(t, nil)
	cases := []struct{ name, zone string }{
		{"UTC is accepted", "UTC"},
		{"an IANA name is accepted", "Europe/Paris"},
		{"an IANA name with a half-hour offset is accepted", "Asia/Kolkata"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, c := range []struct{ path, body string }{
				{"/v1/users/u1/preferences", `{"quietHours":{"start":"22:00","end":"07:00","timeZone":"` + tc.zone + `"}}`},
				{"/v1/users/u1/devices/d1", `{"platform":"ios","token":"t","timeZone":"` + tc.zone + `"}`},
			} {
				// Valid: it reaches the replica, which an unstarted server
				// has not loaded (503).
				if w := do(t, s, "PUT", c.path, keyA, c.body); w.Code != http.StatusServiceUnavailable {
					t.Fatalf("PUT %s: status %d, want 503 (past validation): %s", c.path, w.Code, w.Body)
				}
			}
		})
	}
}

// manyTags returns n distinct JSON strings joined by commas.
func manyTags(n int) string {
	tags := make([]string, n)
	for i := range tags {
		tags[i] = fmt.Sprintf("%q", fmt.Sprintf("tag-%d", i))
	}
	return strings.Join(tags, ",")
}

func TestPreferWaitIsReadAsRFC7240Says(t *testing.T) {
	const longest = time.Duration(math.MaxInt64)
	cases := []struct {
		name, header string
		want         time.Duration
	}{
		{"a plain wait is that many seconds", "wait=5", 5 * time.Second},
		{"a wait among other preferences is read", "respond-async, wait=10", 10 * time.Second},
		{"a wait with a parameter is read", "wait=7; foo=bar", 7 * time.Second},
		{"the name is case-insensitive", "Wait=4", 4 * time.Second},
		{"a quoted wait is read", `wait="3"`, 3 * time.Second},
		{"a quoted huge wait is the longest wait", `wait="99999999999999999999"`, longest},
		{"a wait of zero is no wait", "wait=0", 0},
		{"a negative wait is ignored", "wait=-5", 0},
		{"a signed wait is not delta-seconds and is ignored", "wait=+5", 0},
		{"a malformed wait is ignored", "wait=soon", 0},
		{"a fractional wait is ignored", "wait=1.5", 0},
		{"an empty wait is ignored", "wait=", 0},
		{"no wait is no wait", "return=minimal", 0},
		{"the largest wait a Duration holds is read", "wait=9223372036", 9223372036 * time.Second},
		{"a wait a second past what a Duration holds is the longest wait", "wait=9223372037", longest},
		{"a wait as large as an int64 is the longest wait", "wait=9223372036854775807", longest},
		{"a wait too large for an int64 is the longest wait", "wait=99999999999999999999", longest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{"Prefer": {tc.header}}
			if got := preferWait(h); got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestTheOpenAPIDocumentListsExactlyTheRoutes keeps api/openapi.json true to
// the router: every route is documented and every documented operation is a
// route.
func TestTheOpenAPIDocumentListsExactlyTheRoutes(t *testing.T) {
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1") {
		t.Fatalf("openapi %q, want 3.1.x", doc.OpenAPI)
	}
	var documented, routed []string
	for path, ops := range doc.Paths {
		for method := range ops {
			documented = append(documented, strings.ToUpper(method)+" "+path)
		}
	}
	for _, rt := range apiRoutes() {
		routed = append(routed, rt.method+" "+rt.pattern)
	}
	slices.Sort(documented)
	slices.Sort(routed)
	if !slices.Equal(documented, routed) {
		t.Fatalf("the document and the router differ:\ndocumented %v\nrouted     %v", documented, routed)
	}
	s := unstarted(t, nil)
	w := do(t, s, "GET", "/openapi.json", "", "")
	if w.Code != 200 || !bytes.Equal(w.Body.Bytes(), OpenAPI()) {
		t.Fatalf("GET /openapi.json: status %d", w.Code)
	}
}

// TestTheOpenAPIDocumentListsTheAnswersToABadBody: every route that
// answers a body that is not JSON media (415) or is over the limit (413)
// documents that answer.
func TestTheOpenAPIDocumentListsTheAnswersToABadBody(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]struct {
			Responses map[string]json.RawMessage `json:"responses"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	s := unstarted(t, nil)
	bodies := []struct {
		name, body, ctype string
		status            int
	}{
		{"a body that is not JSON media", `{}`, "text/plain", http.StatusUnsupportedMediaType},
		{"a body over the limit", `{"pad":"` + strings.Repeat("x", 3000) + `"}`, "application/json", http.StatusRequestEntityTooLarge},
	}
	for _, rt := range apiRoutes() {
		if rt.method != "POST" && rt.method != "PUT" {
			continue
		}
		path := strings.NewReplacer("{userId}", "u1", "{deviceId}", "d1", "{name}", "s1", "{webhookId}", "w1",
			"{recipientId}", "u1", "{notificationId}", "0123456789abcdef0123456789abcdef").Replace(rt.pattern)
		for _, b := range bodies {
			t.Run(rt.method+" "+rt.pattern+" documents its answer to "+b.name, func(t *testing.T) {
				w := do(t, s, rt.method, path, keyA, b.body, "Content-Type", b.ctype)
				if w.Code != b.status {
					t.Skipf("answers %d: the route does not read this body", w.Code)
				}
				if _, ok := doc.Paths[rt.pattern][strings.ToLower(rt.method)].Responses[strconv.Itoa(b.status)]; !ok {
					t.Fatalf("answers %d, which openapi.json does not list", b.status)
				}
			})
		}
	}
}

func TestTheVAPIDPublicKeyIsServedWithoutAKeyWhenConfigured(t *testing.T) {
	const key = "BICs0oGl0PzdcNr6s2pQlQoA9p3BQTU-vso1cnIhewx3isO8Ezxly9SWQbyShfKBGvApM6D9bGlh4WpEDXgXsbQ"
	cases := []struct {
		name   string
		key    string
		status int
		body   string
	}{
		{"a configured key is served", key, 200, `{"publicKey":"` + key + `"}`},
		{"without Web Push the answer is 404", "", 404, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := unstarted(t, func(c *Config) { c.VAPIDPublicKey = tc.key })
			w := do(t, s, "GET", "/v1/webpush/vapid-public-key", "", "")
			if w.Code != tc.status {
				t.Fatalf("status %d, want %d", w.Code, tc.status)
			}
			if tc.body != "" && strings.TrimSpace(w.Body.String()) != tc.body {
				t.Fatalf("body %s, want %s", w.Body.String(), tc.body)
			}
			if tc.status == 404 {
				problemOf(t, w)
			}
		})
	}
}
