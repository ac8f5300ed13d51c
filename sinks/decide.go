package sinks

import (
	"time"

	"github.com/heraldhq/herald/schemas"
)

// verdict is what happens to a delivery after one call: a final outcome
// (status set), or a retry at notBefore (status empty).
type verdict struct {
	status    string
	reason    string
	notBefore int64
}

// decide is the runtime's retry rule, a pure function of the policy, the
// call's result, its attempt number, the delivery's expiry (ms) and now:
//   - success → delivered;
//   - permanent → device_retired when the token is invalid, else failed;
//   - retryable and ambiguous → a retry after backoff.Delay(attempt,
//     Retry-After), unless attempt is MaxAttempts (failed: exhausted) or the
//     retry would start at or after the expiry (expired).
func decide(p Policy, res Result, attempt int, expiresAt int64, now time.Time) verdict {
	why := res.Rule
	if res.Reason != "" {
		why = res.Reason
	}
	switch res.Class {
	case Success:
		return verdict{status: schemas.OutcomeDelivered}
	case Permanent:
		if res.RetireDevice {
			return verdict{status: schemas.OutcomeDeviceRetired, reason: why}
		}
		return verdict{status: schemas.OutcomeFailed, reason: "permanent: " + why}
	}
	if attempt >= p.MaxAttempts {
		return verdict{status: schemas.OutcomeFailed, reason: "retries exhausted after " + res.Class.String() + ": " + why}
	}
	next := now.Add(p.Backoff.Delay(attempt, res.RetryAfter)).UnixMilli()
	if next >= expiresAt {
		return verdict{status: schemas.OutcomeExpired, reason: "expires before the next retry after " + res.Class.String() + ": " + why}
	}
	return verdict{notBefore: next}
}
