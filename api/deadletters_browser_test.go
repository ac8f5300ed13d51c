package api

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/topics"
)

// TestTheDeadLetterPanelListsAndRedrivesInChromium opens the dashboard
// (without ClickHouse: the panel reads herald.deadletters on its own) with
// tenant acme's key over two of acme's dead letters and one of globex's:
// the panel lists acme's two with their counts, a redrive without a reason
// is refused on the page, a dry run writes nothing, and redriving one
// writes its command once and marks it redriven.
func TestTheDeadLetterPanelListsAndRedrivesInChromium(t *testing.T) {
	brokers := testenv.Kafka(t)
	cat := testenv.Catalog(t, brokers, 1)
	cl := testenv.Client(t, brokers, kgo.RecordPartitioner(cat.Partitioner()))
	for _, c := range []struct{ tenant, delivery string }{{"acme", "d-1"}, {"globex", "d-2"}, {"acme", "d-3"}} {
		cmd := &schemas.DeliveryCommand{DeliveryID: c.delivery, NotificationID: "n-" + c.delivery, Tenant: c.tenant, Type: "t", Recipient: "u1",
			DeviceID: "dev", Channel: "fcm", Token: "tok", CollapseID: "n", Title: "x", Body: "b"}
		b, err := schemas.Encode(cmd)
		if err != nil {
			t.Fatal(err)
		}
		rec := &kgo.Record{Topic: cat.Name(topics.DeadLetters), Key: []byte(c.delivery), Value: b, Headers: []kgo.RecordHeader{
			{Key: "herald-reason", Value: []byte("permanent: SENDER_ID_MISMATCH")}, {Key: "herald-attempts", Value: []byte("1")},
			{Key: "herald-source", Value: []byte("sink.fcm")}}}
		if err := cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	s := dashboardServer(t, nil)
	s.cfg.Brokers, s.cfg.Catalog = brokers, cat
	ctx, _, err := openDashboard(t, s)
	if err != nil {
		t.Fatal(err)
	}
	panel := func() string {
		t.Helper()
		state, err := chromedp.Run(ctx, chromedp.Poll[string](`(() => { const s = document.getElementById("dead-letters").dataset.state; return s && s !== "loading" && s; })()`,
			chromedp.WithPollingTimeout(time.Minute)))
		if err != nil {
			t.Fatal(err)
		}
		return state
	}
	rows := func() string {
		t.Helper()
		text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`[...document.querySelectorAll("#dead-letter-list tbody tr")].map((tr) => tr.innerText.replace(/\s+/g, " ").trim()).join("\n")`))
		if err != nil {
			t.Fatal(err)
		}
		return text
	}
	text := func(id string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`document.getElementById(%q).textContent`, id)))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	click := func(sel string) {
		t.Helper()
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(sel))); err != nil {
			t.Fatal(err)
		}
	}
	awaitRedrive := func(want string) {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](fmt.Sprintf(`document.getElementById("dead-letters").dataset.redrive === %q`, want),
			chromedp.WithPollingTimeout(time.Minute))); err != nil {
			t.Fatalf("redrive state never %q: %v (result %q)", want, err, text("redrive-result"))
		}
	}

	if state := panel(); state != "loaded" {
		t.Fatalf("panel state %q: %s", state, text("dead-letter-problem"))
	}
	t.Run("the panel lists the tenant's dead letters with counts by reason", func(t *testing.T) {
		got := rows()
		if strings.Count(got, "\n") != 1 || !strings.Contains(got, "n-d-1") || !strings.Contains(got, "n-d-3") || strings.Contains(got, "d-2") {
			t.Errorf("rows:\n%s", got)
		}
		if c := text("dead-letter-counts"); !strings.Contains(c, "2 × sink.fcm · permanent · permanent: SENDER_ID_MISMATCH") {
			t.Errorf("counts %q", c)
		}
	})
	t.Run("a redrive needs a selection and a reason", func(t *testing.T) {
		click("#redrive-button")
		if r := text("redrive-result"); !strings.Contains(r, "Select the dead letters") {
			t.Errorf("result %q", r)
		}
		click(`#dead-letter-list tbody tr:first-child input`)
		click("#redrive-button")
		if r := text("redrive-result"); !strings.Contains(r, "Say why") {
			t.Errorf("result %q", r)
		}
	})
	t.Run("a dry run says what would be redriven", func(t *testing.T) {
		if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS("#redrive-reason"), "sender id fixed")); err != nil {
			t.Fatal(err)
		}
		click("#redrive-dry-run")
		awaitRedrive("dry-run")
		if r := text("redrive-result"); !strings.HasPrefix(r, "Dry run: 1 would be redriven.") {
			t.Errorf("result %q", r)
		}
	})
	t.Run("a redrive sends the selected one once and marks it", func(t *testing.T) {
		click("#redrive-button")
		awaitRedrive("done")
		if r := text("redrive-result"); !strings.HasPrefix(r, "1 redriven.") {
			t.Errorf("result %q", r)
		}
		if panel() != "loaded" || !strings.Contains(rows(), "by api-key:svc: sender id fixed") {
			t.Errorf("rows after the redrive:\n%s", rows())
		}
		cmds := testenv.ReadCommitted(t, brokers, cat.Name(topics.Deliveries("fcm")))
		if len(cmds) != 1 || string(cmds[0].Key) != "d-1" {
			t.Errorf("%d commands redriven, want d-1's once", len(cmds))
		}
		screenshot(t, ctx, "dashboard-dead-letters.png")
	})
}
