package route

import (
	"slices"
	"strings"
	"testing"

	"github.com/heraldhq/herald/schemas"
)

func TestParseChain(t *testing.T) {
	cases := []struct {
		name, in, want, err string
	}{
		{"a timed step with receipts reads back as written", "push > email after 15m unless displayed|opened > feed", "push > email after 15m0s unless displayed|opened > feed", ""},
		{"arrows and 'or' read as '>' and '|'", "push → email after 15m unless displayed or opened → feed", "push > email after 15m0s unless displayed|opened > feed", ""},
		{"an if-failed step", "push > email if failed", "push > email if failed", ""},
		{"joined channels", "apns+webpush > email+feed if failed after 1m", "apns+webpush > email+feed after 1m0s if failed", ""},
		{"one step is no chain", "push", "", "one step"},
		{"the first step takes no condition", "push after 1m > email", "", "takes no condition"},
		{"a channel in two steps is refused", "push > apns if failed", "", "already in an earlier step"},
		{"an unknown channel is named", "push > sms", "", `unknown channel "sms"`},
		{"an unknown receipt is named", "push > email unless clicked", "", `"clicked"`},
		{"a bad duration is named", "push > email after soon", "", `"soon"`},
		{"if without failed is refused", "push > email if", "", `"failed"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseChain(c.in)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one saying %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.String() != c.want {
				t.Fatalf("got %q, want %q", got, c.want)
			}
			again, err := ParseChain(got.String())
			if err != nil || again.String() != got.String() {
				t.Fatalf("%q does not read back: %v", got, err)
			}
		})
	}
}

func TestAChainedTypeFansOutItsFirstStepAndPlansTheRest(t *testing.T) {
	chain, err := ParseChain("push > email if failed > feed")
	if err != nil {
		t.Fatal(err)
	}
	p := Policy{Chains: map[string]Chain{"invoice.paid": chain}, Fallback: map[string]string{"invoice.paid": FeedChannel}}
	mail := dev("addr", "email")
	mail.Token = "u1@example.com"
	cases := []struct {
		name    string
		devices []schemas.Device
		outcome string
		now     []string // channels of the commands emitted now
		later   [][]string
		noPlan  bool
	}{
		{"an iPhone and an address: the push now, the email and the feed planned", []schemas.Device{dev("ios-a", "ios"), mail},
			schemas.DecisionRouted, []string{"apns"}, [][]string{{"email"}, {"feed"}}, false},
		{"no push device: no_target now, the chain planned, the type's fallback channel not used", []schemas.Device{mail},
			schemas.DecisionNoTarget, nil, [][]string{{"email"}, {"feed"}}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := note("invoice.paid", "k1")
			res := p.Decide(n, base.UnixMilli(), Source{Topic: "accepted"}, func(string) (schemas.RouteEntry, bool) { return schemas.RouteEntry{}, false },
				Recipient{Devices: c.devices})
			d := res.Decisions[len(res.Decisions)-1]
			if d.Outcome != c.outcome {
				t.Fatalf("outcome %s (%s), want %s", d.Outcome, d.Detail, c.outcome)
			}
			var now []string
			for _, cmd := range res.Commands {
				now = append(now, cmd.Channel)
			}
			if !slices.Equal(now, c.now) {
				t.Fatalf("commands now on %v, want %v", now, c.now)
			}
			if res.Fallback == nil {
				t.Fatal("no plan")
			}
			if got, ok := ChainOf(d.Detail); !ok || got.String() != chain.String() {
				t.Fatalf("the decision's detail %q does not name the chain", d.Detail)
			}
			ids := map[string]bool{}
			for _, cmd := range res.Commands {
				ids[cmd.DeliveryID] = true
			}
			for i, want := range c.later {
				st := res.Fallback.Steps[i+1]
				var got []string
				for _, cmd := range st.Commands {
					got = append(got, cmd.Channel)
					if ids[cmd.DeliveryID] {
						t.Errorf("delivery id %s is in two steps", cmd.DeliveryID)
					}
					ids[cmd.DeliveryID] = true
				}
				if !slices.Equal(got, want) {
					t.Errorf("step %d sends on %v, want %v", i+2, got, want)
				}
			}
			fallbacks := 0
			for _, dl := range d.Deliveries {
				if dl.State == schemas.DeliveryFallback {
					fallbacks++
				}
			}
			if fallbacks != 2 {
				t.Errorf("the decision lists %d fallback deliveries, want 2: %+v", fallbacks, d.Deliveries)
			}
		})
	}
}

func TestAChainWithNothingToFallBackToPlansNothing(t *testing.T) {
	chain, _ := ParseChain("push > email if failed")
	p := Policy{Chains: map[string]Chain{"invoice.paid": chain}}
	res := p.Decide(note("invoice.paid", "k1"), base.UnixMilli(), Source{}, func(string) (schemas.RouteEntry, bool) { return schemas.RouteEntry{}, false },
		Recipient{Devices: []schemas.Device{dev("ios-a", "ios")}})
	if res.Fallback != nil || strings.Contains(res.Decisions[0].Detail, FallbackChainPrefix) {
		t.Fatalf("plan %+v, detail %q: want none with no address", res.Fallback, res.Decisions[0].Detail)
	}
}
