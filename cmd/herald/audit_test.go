package main

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/heraldhq/herald/analytics/migrations"
	"github.com/heraldhq/herald/internal/testenv"
)

func TestAuditTimelineNamesTheFlagAndHeraldDevsPortWhenClickHouseRefuses(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: connection refused
	code, stderr := runCapturing(t, t.Context(), []string{"audit", "timeline", "--clickhouse-addr", addr, "--id", "52f364d9288c640b306b566e509104bd"})
	for _, want := range []string{"nothing answers at " + addr, "--clickhouse-addr", "herald dev serves it on 127.0.0.1:19000"} {
		if code != 1 || !strings.Contains(stderr, want) {
			t.Errorf("exit %d, want 1 with %q:\n%s", code, want, stderr)
		}
	}
}

func TestAuditTimelineOfAnIdHeraldHoldsNothingForFails(t *testing.T) {
	addr, db := testenv.ClickHouseDB(t)
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := migrations.Apply(context.Background(), conn, migrations.Options{Database: db}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, want string
		args       []string
	}{
		{"an id", "herald holds nothing for this id", []string{"--id", "00000000000000000000000000000000"}},
		{"a recipient", "herald holds nothing for this recipient (u_nobody)", []string{"--recipient", "u_nobody", "--since", "24h"}},
		{"a dedupe key", `herald holds nothing for this dedupe key ("inv_none")`, []string{"--dedupe-key", "inv_none"}},
	} {
		t.Run(tc.name+" the audit does not hold exits 1 saying so", func(t *testing.T) {
			args := append([]string{"audit", "timeline", "--clickhouse-addr", addr, "--database", db}, tc.args...)
			code, stderr := runCapturing(t, t.Context(), args)
			if code != 1 || !strings.Contains(stderr, tc.want) || strings.Contains(stderr, "NO:") {
				t.Fatalf("exit %d, want 1 with %q and no answer:\n%s", code, tc.want, stderr)
			}
		})
	}
}

func TestTheTimelineWrapsAtCOLUMNSOrAHundred(t *testing.T) {
	for _, tc := range []struct {
		columns string
		want    int
	}{{"", 100}, {"80", 80}, {"wide", 100}, {"-5", 100}, {"0", 100}} {
		t.Run("COLUMNS="+strconv.Quote(tc.columns)+" wraps at "+strconv.Itoa(tc.want), func(t *testing.T) {
			t.Setenv("COLUMNS", tc.columns)
			if got := terminalWidth(); got != tc.want {
				t.Fatalf("width %d, want %d", got, tc.want)
			}
		})
	}
}
