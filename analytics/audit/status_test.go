package audit

import (
	"testing"

	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sdk"
)

func TestANotificationsStatusMovesWithThePipeline(t *testing.T) {
	route := func(outcome string, ids ...string) *schemas.Decision {
		d := &schemas.Decision{Stage: "route", Outcome: outcome}
		for _, id := range ids {
			d.Deliveries = append(d.Deliveries, schemas.DecisionDelivery{DeliveryID: id})
		}
		return d
	}
	for _, c := range []struct {
		name   string
		dedupe string
		route  *schemas.Decision
		finals map[string]string
		want   string
	}{
		{"it is pending before the dedupe stage decides", "", nil, nil, sdk.StatusPending},
		{"a duplicate stays a duplicate", schemas.DecisionDuplicate, nil, nil, schemas.DecisionDuplicate},
		{"a replay stays a replay", schemas.DecisionIdempotentReplay, nil, nil, schemas.DecisionIdempotentReplay},
		{"it is accepted until the route stage decides", schemas.DecisionAccepted, nil, nil, schemas.DecisionAccepted},
		{"a rate-limited notification says so", schemas.DecisionAccepted, route(schemas.DecisionRateLimited), nil, schemas.DecisionRateLimited},
		{"it is routed while a delivery has no final outcome", schemas.DecisionAccepted, route(schemas.DecisionRouted, "d1", "d2"),
			map[string]string{"d1": schemas.OutcomeDelivered}, sdk.StatusRouted},
		{"it is delivered once every delivery is", schemas.DecisionAccepted, route(schemas.DecisionRouted, "d1", "d2"),
			map[string]string{"d1": schemas.OutcomeDelivered, "d2": schemas.OutcomeDelivered}, sdk.StatusDelivered},
		{"it is partially delivered when some failed", schemas.DecisionAccepted, route(schemas.DecisionRouted, "d1", "d2"),
			map[string]string{"d1": schemas.OutcomeDelivered, "d2": schemas.OutcomeFailed}, sdk.StatusPartiallyDelivered},
		{"it failed when none was delivered", schemas.DecisionAccepted, route(schemas.DecisionRouted, "d1", "d2"),
			map[string]string{"d1": schemas.OutcomeDeviceRetired, "d2": schemas.OutcomeExpired}, sdk.StatusFailed},
		{"it expired when every delivery expired", schemas.DecisionAccepted, route(schemas.DecisionDeferred, "d1"),
			map[string]string{"d1": schemas.OutcomeExpired}, sdk.StatusExpired},
		{"outcomes of other deliveries do not count", schemas.DecisionAccepted, route(schemas.DecisionRouted, "d1"),
			map[string]string{"d9": schemas.OutcomeDelivered}, sdk.StatusRouted},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := NotificationStatus(c.dedupe, c.route, c.finals); got != c.want {
				t.Fatalf("status %q, want %q", got, c.want)
			}
		})
	}
}
