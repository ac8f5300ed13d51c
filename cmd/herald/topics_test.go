package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/topics"
)

// TestTopicsCreateThenVerifyOnTheRealBroker runs the commands an operator
// runs: create, verify (no drift), then verify again after someone changed a
// config by hand (drift reported, exit 1), create --fix-configs, and
// delete (refused unless confirmed with the prefix; idempotent).
func TestTopicsCreateThenVerifyOnTheRealBroker(t *testing.T) {
	brokers := testenv.Kafka(t)
	prefix := fmt.Sprintf("t%08x.herald.", rand.Uint32())
	adm := kadm.NewClient(testenv.Client(t, brokers))
	testenv.DeleteCatalogOnCleanup(t, adm, topics.New(topics.Options{Prefix: prefix, Partitions: 2, Replication: 1}))
	herald := func(args ...string) (int, string) {
		var out, errOut bytes.Buffer
		args = append(args, "--brokers", brokers[0], "--topic-prefix", prefix, "--partitions", "2", "--replication", "1")
		code := run(context.Background(), args, &out, &errOut)
		return code, out.String() + errOut.String()
	}
	steps := []struct {
		name     string
		args     []string
		before   func()
		wantCode int
		want     string
		retry    bool // only idempotent steps: metadata and configs propagate asynchronously
	}{
		{name: "create makes every topic", args: []string{"topics", "create"}, want: "created " + prefix + "seen"},
		{name: "verify finds no drift", args: []string{"topics", "verify"}, want: "topics match the catalog", retry: true},
		{name: "verify reports a config changed by hand", args: []string{"topics", "verify"}, wantCode: 1,
			before: func() {
				v := "delete"
				if _, err := adm.AlterTopicConfigs(context.Background(), []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "cleanup.policy", Value: &v}}, prefix+"seen"); err != nil {
					t.Fatal(err)
				}
			},
			want: `drift ` + prefix + `seen: cleanup.policy is "delete", catalog wants "compact"`, retry: true},
		{name: "create --fix-configs sets it back", args: []string{"topics", "create", "--fix-configs"}, want: "topics match the catalog", retry: true},
		{name: "verify --segment-bytes reports topics made without it", args: []string{"topics", "verify", "--segment-bytes", "1073741824"}, wantCode: 1,
			want: `seen: segment.bytes is "1048576", catalog wants "1073741824"`}, // the test broker rolls at 1 MiB
		{name: "create --segment-bytes --fix-configs sets it on every topic", args: []string{"topics", "create", "--segment-bytes", "1073741824", "--fix-configs"},
			want: "topics match the catalog", retry: true},
		{name: "verify --segment-bytes then finds no drift", args: []string{"topics", "verify", "--segment-bytes", "1073741824"}, want: "topics match the catalog", retry: true},
		{name: "a negative --segment-bytes is refused", args: []string{"topics", "create", "--segment-bytes", "-1"}, wantCode: 2,
			want: "--segment-bytes must not be negative"},
		{name: "delete without --confirm is refused", args: []string{"topics", "delete"}, wantCode: 2,
			want: "--confirm must repeat the topic prefix " + fmt.Sprintf("%q", prefix)},
		{name: "delete with another prefix confirmed is refused", args: []string{"topics", "delete", "--confirm", "herald."}, wantCode: 2,
			want: "--confirm must repeat the topic prefix"},
		{name: "verify after a refused delete finds every topic", args: []string{"topics", "verify"}, want: "topics match the catalog"},
		{name: "delete --confirm with the prefix deletes every topic", args: []string{"topics", "delete", "--confirm", prefix},
			want: "deleted " + prefix + "seen"},
		{name: "verify then reports them missing", args: []string{"topics", "verify"}, wantCode: 1, want: prefix + "seen: missing", retry: true},
		{name: "delete again deletes nothing", args: []string{"topics", "delete", "--confirm", prefix}, want: "ok: 0 of the catalog's", retry: true},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			if s.before != nil {
				s.before()
			}
			var code int
			var out string
			for i := 0; i < 50; i++ {
				if code, out = herald(s.args...); code == s.wantCode && strings.Contains(out, s.want) {
					return
				}
				if !s.retry {
					break
				}
				time.Sleep(100 * time.Millisecond) // a config change propagates asynchronously
			}
			t.Fatalf("herald %v: exit %d, output:\n%s\nwant exit %d and %q", s.args, code, out, s.wantCode, s.want)
		})
	}
}
