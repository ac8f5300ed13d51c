package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/heraldhq/herald/bench/apiload"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/topics"
)

func TestBenchAPISendsDistinctNotificationsToARunningAPI(t *testing.T) {
	brokers := testenv.Kafka(t)
	addr, cat, _ := startAPICommand(t, brokers)
	t.Setenv("HERALD_API_KEY", "k1")
	total := 0
	for _, args := range [][]string{
		{"--clients", "4", "--duration", "1s", "--run", "r1"},
		{"--rate", "100", "--duration", "500ms", "--run", "r2", "--recipients", "7"},
	} {
		var out, errOut bytes.Buffer
		code := run(context.Background(), append([]string{"bench", "api", "--url", "http://" + addr, "--json"}, args...), &out, &errOut)
		if code != 0 {
			t.Fatalf("herald bench api %v exited %d: %s", args, code, errOut.String())
		}
		var r apiload.Report
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			t.Fatalf("the report is not JSON: %v\n%s", err, out.String())
		}
		if r.Requests == 0 || r.StatusCodes["202"] != r.Requests {
			t.Fatalf("herald bench api %v: %s", args, out.String())
		}
		total += r.Requests
	}
	// Every send the API accepted is one request record, each a
	// notification of its own: no send repeated another, within a run or
	// across the two.
	ids := map[string]bool{}
	for _, rec := range testenv.ReadCommitted(t, brokers, cat.Name(topics.Requests)) {
		var req schemas.Request
		if err := schemas.Decode(rec.Value, &req); err != nil {
			t.Fatal(err)
		}
		if req.Tenant != "acme" || req.Type != "bench.load" || ids[req.NotificationID] {
			t.Fatalf("request %+v: tenant acme, type bench.load and a new notification id expected", req)
		}
		ids[req.NotificationID] = true
	}
	if len(ids) != total {
		t.Fatalf("the requests topic holds %d notifications, the reports %d sends answered 202", len(ids), total)
	}
}

func TestBenchAPIRefusesBadSettingsNamingThem(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"without a URL", []string{"--clients", "1"}, "--url: the API's base URL is required"},
		{"with both models", []string{"--url", "http://127.0.0.1:1", "--clients", "1", "--rate", "5"}, "--clients, --rate: set exactly one"},
		{"with every send a repeat", []string{"--url", "http://127.0.0.1:1", "--clients", "1", "--sends", "5", "--repeat", "1"}, "--repeat: must be at least 0 and below 1"},
		{"with one of two URLs not http", []string{"--url", "http://127.0.0.1:1,127.0.0.1:2", "--clients", "1"}, `--url: "127.0.0.1:2" is not an http://`},
		{"with no connection to send on", []string{"--url", "http://127.0.0.1:1", "--rate", "5", "--max-sends-in-flight", "0"}, "--max-sends-in-flight and --recipients must be positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run(context.Background(), append([]string{"bench", "api"}, tc.args...), &out, &errOut)
			if code != 2 || !strings.Contains(errOut.String(), tc.want) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, errOut.String(), tc.want)
			}
		})
	}
}
