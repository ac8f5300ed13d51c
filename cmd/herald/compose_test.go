package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/heraldhq/herald/api"
)

// compose is the part of docker-compose.yml this test checks.
type compose struct {
	Services map[string]struct {
		Image       string            `yaml:"image"`
		Command     []string          `yaml:"command"`
		Environment map[string]string `yaml:"environment"`
		Healthcheck struct {
			Test []string `yaml:"test"`
		} `yaml:"healthcheck"`
	} `yaml:"services"`
}

// TestDockerComposeIsTrueToTheCode checks what can be checked without a
// Docker engine: every herald service runs a real subcommand with flags it
// accepts, every HERALD_ variable names a flag of that subcommand, and the
// Kafka image is the version the test suite runs.
func TestDockerComposeIsTrueToTheCode(t *testing.T) {
	raw, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var c compose
	if err := yaml.Unmarshal(raw, &c); err != nil {
		t.Fatalf("docker-compose.yml does not parse: %v", err)
	}
	for name, svc := range c.Services {
		if svc.Image != "herald:dev" {
			continue
		}
		t.Run("service "+name+" runs a herald command with valid flags and environment", func(t *testing.T) {
			if len(svc.Command) == 0 {
				t.Fatal("no command")
			}
			args := append([]string{}, svc.Command...)
			for env, val := range svc.Environment {
				if !strings.HasPrefix(env, "HERALD_") {
					continue
				}
				if env == "HERALD_LOG_LEVEL" {
					continue // read by main, not a flag
				}
				flagName := "--" + strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(env, "HERALD_")), "_", "-")
				args = append(args, flagName+"="+val) // one argument: a bool flag takes no separate value
			}
			if role := svc.Command[0]; roles[role] {
				checkHealthcheck(t, svc.Healthcheck.Test, svc.Environment["HERALD_METRICS_ADDR"])
			}
			args = append(args, "-h")
			var out, errOut bytes.Buffer
			if code := run(context.Background(), args, &out, &errOut); code != 0 {
				t.Fatalf("herald %v exits %d: %s", args, code, errOut.String())
			}
		})
	}
	t.Run("the healthcheck's command is a herald command", func(t *testing.T) {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), []string{"probe", "-h"}, &out, &errOut); code != 0 {
			t.Fatalf("herald probe -h exits %d: %s", code, errOut.String())
		}
	})
	t.Run("the example API key file parses", func(t *testing.T) {
		f, err := os.Open("../../deploy/api-keys")
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		keys, err := api.ParseKeys(f)
		if err != nil || len(keys) == 0 {
			t.Fatalf("deploy/api-keys: %d keys, %v", len(keys), err)
		}
	})
	t.Run("the Kafka image is the version the test broker runs", func(t *testing.T) {
		pom, err := os.ReadFile("../../scripts/kafka/pom.xml")
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`<kafka.version>([^<]+)</kafka.version>`).FindSubmatch(pom)
		if m == nil {
			t.Fatal("no kafka_2.13 version in scripts/kafka/pom.xml")
		}
		if img := c.Services["kafka"].Image; img != "apache/kafka:"+string(m[1]) {
			t.Fatalf("compose runs %s, tests run Kafka %s", img, m[1])
		}
	})
}

// roles are the long-running subcommands: each serves /readyz on
// --metrics-addr, and its service's healthcheck asks it.
var roles = map[string]bool{"api": true, "dedupe": true, "route": true, "fallback": true, "sink": true, "audit-writer": true}

func checkHealthcheck(t *testing.T, test []string, metricsAddr string) {
	t.Helper()
	if metricsAddr == "" {
		t.Fatal("HERALD_METRICS_ADDR is not set: the role serves no /readyz")
	}
	_, port, err := net.SplitHostPort(metricsAddr)
	if err != nil {
		t.Fatalf("HERALD_METRICS_ADDR %q: %v", metricsAddr, err)
	}
	want := []string{"CMD", "/herald", "probe", "http://127.0.0.1:" + port + "/readyz"}
	if strings.Join(test, " ") != strings.Join(want, " ") {
		t.Fatalf("healthcheck %q, want %q", test, want)
	}
}
