package fcm_test

import (
	"encoding/json"
	"testing"

	"github.com/heraldhq/herald/sinks"
	"github.com/heraldhq/herald/sinks/fcm"
)

// errorBody is an HTTP v1 error body (google.rpc.Status); an FcmError
// detail with code when code is set, and details of other types after it.
func errorBody(status int, rpc, code, message string, otherDetails ...string) []byte {
	details := []map[string]string{}
	if code != "" {
		details = append(details, map[string]string{"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": code})
	}
	for _, typ := range otherDetails {
		details = append(details, map[string]string{"@type": typ, "errorCode": "UNREGISTERED"})
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"code": status, "status": rpc, "message": message, "details": details}})
	return b
}

func TestClassifyFollowsThePackageTableForEveryAnswer(t *testing.T) {
	cases := []struct {
		name   string
		status int
		body   []byte
		class  sinks.Class
		rule   string
		reason string
		retire bool
	}{
		{"200 is accepted", 200, []byte(`{"name":"projects/p/messages/1"}`), sinks.Success, "accepted", "", false},
		{"UNREGISTERED retires the device", 404, errorBody(404, "NOT_FOUND", "UNREGISTERED", "Requested entity was not found."), sinks.Permanent, "unregistered", "UNREGISTERED", true},
		{"INVALID_ARGUMENT about the registration token retires the device", 400, errorBody(400, "INVALID_ARGUMENT", "INVALID_ARGUMENT", "The registration token is not a valid FCM registration token"), sinks.Permanent, "bad_token", "INVALID_ARGUMENT", true},
		{"INVALID_ARGUMENT about anything else keeps the device", 400, errorBody(400, "INVALID_ARGUMENT", "INVALID_ARGUMENT", "Message is too big"), sinks.Permanent, "invalid_argument", "INVALID_ARGUMENT", false},
		{"SENDER_ID_MISMATCH is a configuration error", 403, errorBody(403, "PERMISSION_DENIED", "SENDER_ID_MISMATCH", ""), sinks.Permanent, "sender_id_mismatch", "SENDER_ID_MISMATCH", false},
		{"THIRD_PARTY_AUTH_ERROR is a configuration error", 401, errorBody(401, "UNAUTHENTICATED", "THIRD_PARTY_AUTH_ERROR", ""), sinks.Permanent, "third_party_auth", "THIRD_PARTY_AUTH_ERROR", false},
		{"QUOTA_EXCEEDED is retryable", 429, errorBody(429, "RESOURCE_EXHAUSTED", "QUOTA_EXCEEDED", ""), sinks.Retryable, "quota_exceeded", "QUOTA_EXCEEDED", false},
		{"a 429 without an error code is quota_exceeded", 429, errorBody(429, "RESOURCE_EXHAUSTED", "", ""), sinks.Retryable, "quota_exceeded", "RESOURCE_EXHAUSTED", false},
		{"UNAVAILABLE is retryable", 503, errorBody(503, "UNAVAILABLE", "UNAVAILABLE", ""), sinks.Retryable, "unavailable", "UNAVAILABLE", false},
		{"a 503 without a body is unavailable", 503, nil, sinks.Retryable, "unavailable", "", false},
		{"INTERNAL is retryable", 500, errorBody(500, "INTERNAL", "INTERNAL", ""), sinks.Retryable, "internal", "INTERNAL", false},
		{"a 500 with an unreadable body is internal", 500, []byte("<html>oops</html>"), sinks.Retryable, "internal", "", false},
		{"a 500 with another error code (UNSPECIFIED_ERROR) is http_5xx", 500, errorBody(500, "INTERNAL", "UNSPECIFIED_ERROR", ""), sinks.Retryable, "http_5xx", "UNSPECIFIED_ERROR", false},
		{"another 5xx (502) is retryable", 502, nil, sinks.Retryable, "http_5xx", "", false},
		{"401 UNAUTHENTICATED is an auth error", 401, errorBody(401, "UNAUTHENTICATED", "", "Request had invalid authentication credentials."), sinks.Permanent, "auth", "UNAUTHENTICATED", false},
		{"403 PERMISSION_DENIED is an auth error", 403, errorBody(403, "PERMISSION_DENIED", "", ""), sinks.Permanent, "auth", "PERMISSION_DENIED", false},
		{"another 4xx (409) is permanent", 409, errorBody(409, "ABORTED", "", ""), sinks.Permanent, "http_4xx", "ABORTED", false},
		{"a detail that is no FcmError gives no error code", 404, errorBody(404, "NOT_FOUND", "", "", "type.googleapis.com/google.rpc.BadRequest"), sinks.Permanent, "http_4xx", "NOT_FOUND", false},
		{"a 404 with an unreadable body keeps the device", 404, []byte("Not Found"), sinks.Permanent, "http_4xx", "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := fcm.Classify(tc.status, tc.body)
			if r.Class != tc.class || r.Rule != tc.rule || r.Reason != tc.reason || r.RetireDevice != tc.retire || r.Status != tc.status {
				t.Fatalf("Classify(%d, %s) = %v %q reason %q retire %v status %d, want %v %q reason %q retire %v",
					tc.status, tc.body, r.Class, r.Rule, r.Reason, r.RetireDevice, r.Status, tc.class, tc.rule, tc.reason, tc.retire)
			}
		})
	}
}
