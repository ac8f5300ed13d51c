package audit_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/analytics/audit"
	"github.com/heraldhq/herald/analytics/internal/fixture"
	"github.com/heraldhq/herald/schemas"
)

func TestSelectorsAreChecked(t *testing.T) {
	cases := []struct {
		name string
		sel  audit.Selector
	}{
		{"nothing to look for is refused", audit.Selector{}},
		{"an id and a recipient at once are refused", audit.Selector{NotificationID: "x", Recipient: "u", Since: time.Now()}},
		{"a recipient without a start time is refused", audit.Selector{Recipient: "u"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := audit.Load(context.Background(), nil, "herald", c.sel); err == nil {
				t.Fatal("Load accepted the selector")
			}
		})
	}
}

// oracle answers "did anything reach a device twice?" for one notification
// straight from the attempts produced.
func oracle(f *fixture.Fixture, nid string) audit.Answer {
	sent, ambiguous := map[string]int{}, map[string]int{}
	for _, a := range f.Attempts {
		if a.NotificationID != nid {
			continue
		}
		switch a.Result {
		case schemas.AttemptSent:
			sent[a.DeliveryID]++
		case schemas.AttemptAmbiguous:
			ambiguous[a.DeliveryID]++
		}
	}
	answer := audit.No
	for d, n := range sent {
		if n >= 2 {
			return audit.Yes
		}
		if ambiguous[d] > 0 {
			answer = audit.Possibly
		}
	}
	for d := range ambiguous {
		if sent[d]+ambiguous[d] >= 2 {
			answer = audit.Possibly
		}
	}
	return answer
}

func TestTimelinesOnAPipelineRun(t *testing.T) {
	f := fixture.Run(t)
	ctx := context.Background()

	t.Run("every notification's answer matches its attempts, and each answer occurs", func(t *testing.T) {
		seen := map[audit.Answer]int{}
		ids := map[string]bool{}
		for _, d := range f.Decisions {
			if d.Outcome == schemas.DecisionAccepted {
				ids[d.NotificationID] = true
			}
		}
		for nid := range ids {
			tl, err := audit.Load(ctx, f.Conn, f.DB, audit.Selector{NotificationID: nid})
			if err != nil {
				t.Fatal(err)
			}
			want := oracle(f, nid)
			if tl.Verdict.Answer != want {
				t.Errorf("notification %s: answer %s, attempts say %s (%v)", nid, tl.Verdict.Answer, want, tl.Verdict.Reasons)
			}
			seen[tl.Verdict.Answer]++
		}
		for _, a := range []audit.Answer{audit.No, audit.Possibly, audit.Yes} {
			if seen[a] == 0 {
				t.Errorf("no notification answers %s: the fixture lacks that case (%v)", a, seen)
			}
		}
	})

	t.Run("a notification accepted again after its window says it was sent twice and why", func(t *testing.T) {
		accepted := map[string]int{}
		for _, d := range f.Decisions {
			if d.Outcome == schemas.DecisionAccepted {
				accepted[d.NotificationID]++
			}
		}
		var nid string
		for id, n := range accepted {
			if n == 2 && oracle(f, id) == audit.Yes {
				nid = id
			}
		}
		if nid == "" {
			t.Fatal("the fixture has no notification accepted twice and sent twice")
		}
		tl, err := audit.Load(ctx, f.Conn, f.DB, audit.Selector{NotificationID: nid})
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		if err := tl.Print(&out); err != nil {
			t.Fatal(err)
		}
		text := out.String()
		t.Logf("%s", text)
		for _, want := range []string{"YES", "accepted 2 times", "dedupe window had ended"} {
			if !strings.Contains(text, want) {
				t.Errorf("timeline lacks %q:\n%s", want, text)
			}
		}
	})

	t.Run("a duplicate is shown with the request it repeats", func(t *testing.T) {
		var dup schemas.Decision
		for _, d := range f.Decisions {
			if d.Outcome == schemas.DecisionDuplicate && d.Type == "invoice.paid" {
				dup = d
				break
			}
		}
		tl, err := audit.Load(ctx, f.Conn, f.DB, audit.Selector{NotificationID: dup.NotificationID})
		if err != nil {
			t.Fatal(err)
		}
		if len(tl.Requests) != 3 || len(tl.Decisions) != 3 {
			t.Fatalf("%d requests and %d decisions, want the original and its two repeats", len(tl.Requests), len(tl.Decisions))
		}
		var out strings.Builder
		tl.Print(&out)
		if !strings.Contains(out.String(), "duplicate (request "+dup.RequestID) || !strings.Contains(out.String(), "repeat of request "+dup.OriginalRequestID) {
			t.Fatalf("timeline does not explain the duplicate:\n%s", out.String())
		}
	})

	t.Run("a recipient's timeline holds every record about the recipient", func(t *testing.T) {
		tl, err := audit.Load(ctx, f.Conn, f.DB, audit.Selector{Recipient: "u_audit", Tenant: "acme", Since: f.Until.Add(-49 * time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		want := [4]int{}
		for _, r := range f.Requests {
			if r.Tenant == "acme" && r.Recipient == "u_audit" {
				want[0]++
			}
		}
		for _, d := range f.Decisions {
			if d.Tenant == "acme" && d.Recipient == "u_audit" {
				want[1]++
			}
		}
		for _, a := range f.Attempts {
			if a.Tenant == "acme" && a.Recipient == "u_audit" {
				want[2]++
			}
		}
		for _, o := range f.Outcomes {
			if o.Tenant == "acme" && o.Recipient == "u_audit" {
				want[3]++
			}
		}
		got := [4]int{len(tl.Requests), len(tl.Decisions), len(tl.Attempts), len(tl.Outcomes)}
		if got != want || want[0] == 0 || want[2] == 0 {
			t.Fatalf("requests, decisions, attempts, outcomes = %v, records %v", got, want)
		}
		for i := 1; i < len(tl.Decisions); i++ {
			if tl.Decisions[i].At.Before(tl.Decisions[i-1].At) {
				t.Fatal("decisions are not in time order")
			}
		}
	})

	t.Run("a notification's receipts are shown apart from its attempts, a receipt sent twice once", func(t *testing.T) {
		copies := map[string]int{}
		var twice schemas.Receipt
		for _, rc := range f.Receipts {
			if copies[rc.ReceiptID]++; copies[rc.ReceiptID] == 2 {
				twice = rc
			}
		}
		if twice.ReceiptID == "" {
			t.Fatal("the fixture sends no receipt twice")
		}
		tl, err := audit.Load(ctx, f.Conn, f.DB, audit.Selector{NotificationID: twice.NotificationID, Tenant: twice.Tenant})
		if err != nil {
			t.Fatal(err)
		}
		var got, want []string
		for _, r := range tl.Receipts {
			got = append(got, r.DeviceID+" "+r.Kind+" "+r.ReceiptID)
		}
		kept := map[string]bool{}
		for _, rc := range f.Receipts {
			if rc.NotificationID == twice.NotificationID && rc.Tenant == twice.Tenant && !kept[rc.ReceiptID] {
				kept[rc.ReceiptID] = true
				want = append(want, rc.DeviceID+" "+rc.Kind+" "+rc.ReceiptID)
			}
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("receipts %q, want %q", got, want)
		}
		var out strings.Builder
		if err := tl.Print(&out); err != nil {
			t.Fatal(err)
		}
		text := out.String()
		for _, s := range []string{"reported displayed", "reported dropped", "seen-set dropped a repeat", "attempt 1: sent"} {
			if !strings.Contains(text, s) {
				t.Errorf("timeline lacks %q:\n%s", s, text)
			}
		}
	})

	t.Run("a dedupe key's timeline holds its requests and decisions", func(t *testing.T) {
		tl, err := audit.Load(ctx, f.Conn, f.DB, audit.Selector{DedupeKey: "inv_0", Tenant: "acme", Type: "invoice.paid"})
		if err != nil {
			t.Fatal(err)
		}
		if len(tl.Requests) != 3 || len(tl.Decisions) != 3 || len(tl.Attempts) == 0 {
			t.Fatalf("%d requests, %d decisions, %d attempts; want 3, 3 and some", len(tl.Requests), len(tl.Decisions), len(tl.Attempts))
		}
		empty, err := audit.Load(ctx, f.Conn, f.DB, audit.Selector{DedupeKey: "no-such-key"})
		if err != nil || len(empty.Requests)+len(empty.Decisions) != 0 || empty.Verdict.Answer != audit.No {
			t.Fatalf("unknown key: %+v, %v", empty, err)
		}
	})
}
