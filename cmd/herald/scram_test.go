package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heraldhq/herald/internal/testenv"
)

// scramBroker is a second, private Apache Kafka broker (the test broker's
// jars, its own data directory and ports; the shared broker is not
// touched) with one SASL_SSL listener: SCRAM-SHA-256 and SCRAM-SHA-512
// users made at format time, and a server certificate of a generated CA.
type scramBroker struct {
	addr string
	ca   testCA
}

// scramUsers are the broker's SCRAM users: mechanism, user, password.
var scramUsers = [][3]string{
	{"SCRAM-SHA-512", "admin", "admin-pw-never-shown"},
	{"SCRAM-SHA-512", "herald512", testSASLPassword},
	{"SCRAM-SHA-256", "herald256", testSASLPassword},
}

func startSCRAMBroker(t *testing.T) scramBroker {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a Kafka broker (skipped under -short)")
	}
	libs, err := filepath.Abs("../../.cache/kafka/libs")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(libs, ".installed")); err != nil {
		t.Fatalf("the Kafka jars are not installed in %s (run scripts/kafka/kafka install): %v", libs, err)
	}
	java := "java"
	if h := os.Getenv("JAVA_HOME"); h != "" {
		java = filepath.Join(h, "bin", "java")
	}
	if _, err := exec.LookPath(java); err != nil {
		t.Fatalf("no java to run the SCRAM broker (scripts/kafka/kafka installs it): %v", err)
	}
	dir := t.TempDir()
	ca := newTestCA(t)
	keystore := filepath.Join(dir, "keystore.pem")
	if err := os.WriteFile(keystore, ca.serverPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	port, cport := testenv.FreePort(t), testenv.FreePort(t)
	admin := scramUsers[0]
	props := strings.Join([]string{
		"process.roles=broker,controller", "node.id=1",
		fmt.Sprintf("controller.quorum.voters=1@127.0.0.1:%d", cport),
		"controller.listener.names=CONTROLLER",
		fmt.Sprintf("listeners=SASL_SSL://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d", port, cport),
		fmt.Sprintf("advertised.listeners=SASL_SSL://127.0.0.1:%d", port),
		"listener.security.protocol.map=CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL",
		"inter.broker.listener.name=SASL_SSL",
		"sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512",
		"sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512",
		`listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="` +
			admin[1] + `" password="` + admin[2] + `";`,
		`listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;`,
		"ssl.keystore.type=PEM", "ssl.keystore.location=" + keystore,
		"ssl.truststore.type=PEM", "ssl.truststore.location=" + ca.caFile,
		"log.dirs=" + filepath.Join(dir, "data"),
		"num.network.threads=1", "num.io.threads=2", "background.threads=2",
		"auto.create.topics.enable=false", "num.partitions=1", "default.replication.factor=1", "min.insync.replicas=1",
		"offsets.topic.replication.factor=1", "offsets.topic.num.partitions=1",
		"transaction.state.log.replication.factor=1", "transaction.state.log.min.isr=1", "transaction.state.log.num.partitions=1",
		"share.coordinator.state.topic.replication.factor=1", "share.coordinator.state.topic.min.isr=1",
		"group.initial.rebalance.delay.ms=0", "group.min.session.timeout.ms=1000", "log.cleaner.enable=false",
	}, "\n")
	conf := filepath.Join(dir, "server.properties")
	logs := filepath.Join(dir, "logs")
	log4j := filepath.Join(dir, "log4j2.properties")
	for path, body := range map[string]string{
		conf: props + "\n",
		log4j: "status = warn\nappender.f.type = File\nappender.f.name = f\nappender.f.fileName = " + filepath.Join(logs, "server.log") +
			"\nappender.f.layout.type = PatternLayout\nappender.f.layout.pattern = [%d] %p %m (%c)%n\nrootLogger.level = INFO\nrootLogger.appenderRef.f.ref = f\n",
	} {
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	jvm := []string{"-Xmx256m", "-Xms256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:CICompilerCount=2",
		"-Dlog4j2.configurationFile=" + log4j, "-Dkafka.logs.dir=" + logs, "-cp", libs + "/*"}
	format := append(append([]string{}, jvm...), "kafka.tools.StorageTool", "format", "-t", "aGVyYWxkLXNjcmFtLXRlc3Q", "-c", conf)
	for _, u := range scramUsers {
		format = append(format, "--add-scram", fmt.Sprintf("%s=[name=%s,password=%s]", u[0], u[1], u[2]))
	}
	if out, err := exec.Command(java, format...).CombinedOutput(); err != nil {
		t.Fatalf("format the SCRAM broker's storage: %v\n%s", err, out)
	}
	out, err := os.Create(filepath.Join(dir, "kafka.out"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(java, append(jvm, "kafka.Kafka", conf)...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); out.Close(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill() // this test's own broker, by its pid
		<-exited
	})
	deadline := time.Now().Add(3 * time.Minute)
	for {
		b, _ := os.ReadFile(filepath.Join(logs, "server.log"))
		if bytes.Contains(b, []byte("Kafka Server started (kafka.server.KafkaRaftServer)")) {
			break
		}
		select {
		case <-exited:
			o, _ := os.ReadFile(filepath.Join(dir, "kafka.out"))
			t.Fatalf("the SCRAM broker exited during startup:\n%s\n%s", o, tail(string(b), 40))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the SCRAM broker did not start in 3 minutes:\n%s", tail(string(b), 40))
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(logs, "server.log"))
			t.Logf("the SCRAM broker's log:\n%s", tail(string(b), 60))
		}
	})
	return scramBroker{addr: fmt.Sprintf("127.0.0.1:%d", port), ca: ca}
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// TestKafkaSCRAMOverTLSOnARealBroker connects herald with the SASL and TLS
// settings of a configuration file to a real Apache Kafka broker that
// requires SCRAM over TLS: `herald topics create` and `verify` with each
// SCRAM mechanism, then `herald dedupe` (a transactional consumer group)
// until it is ready. A wrong password and an untrusted certificate are
// refused, and no output shows a secret.
func TestKafkaSCRAMOverTLSOnARealBroker(t *testing.T) {
	b := startSCRAMBroker(t)
	config := func(t *testing.T, extra string) string {
		return writeFile(t, "herald.yaml", "brokers: "+b.addr+"\npartitions: 1\nreplication: 1\ntopic-prefix: scram.\n"+
			"kafka-tls-ca-file: "+b.ca.caFile+"\n"+extra)
	}
	tests := []struct {
		name, args, config, password string
		ok                           bool
		why                          string
	}{
		{"topics create with SCRAM-SHA-512 over TLS makes the catalog", "topics create",
			"kafka-sasl-mechanism: SCRAM-SHA-512\nkafka-sasl-user: herald512\n", testSASLPassword, true, ""},
		{"topics verify with SCRAM-SHA-256 finds it", "topics verify",
			"kafka-sasl-mechanism: SCRAM-SHA-256\nkafka-sasl-user: herald256\n", testSASLPassword, true, ""},
		{"a wrong password is refused by the broker", "topics verify",
			"kafka-sasl-mechanism: SCRAM-SHA-512\nkafka-sasl-user: herald512\n", "not-the-password", false, "SASL_AUTHENTICATION_FAILED"},
		{"the wrong mechanism for the user is refused", "topics verify",
			"kafka-sasl-mechanism: SCRAM-SHA-256\nkafka-sasl-user: herald512\n", testSASLPassword, false, "SASL_AUTHENTICATION_FAILED"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("HERALD_KAFKA_SASL_PASSWORD", tc.password)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			var out, errb bytes.Buffer
			code := run(ctx, append(strings.Fields(tc.args), "--config", config(t, tc.config)), &out, &errb)
			if (code == 0) != tc.ok || !strings.Contains(errb.String(), tc.why) {
				t.Fatalf("exit %d, want success %v and %q in:\n%s%s", code, tc.ok, tc.why, out.String(), errb.String())
			}
			assertNoSecret(t, "herald "+tc.args, out.String()+errb.String())
		})
	}
	t.Run("a certificate from another CA is refused", func(t *testing.T) {
		t.Setenv("HERALD_KAFKA_SASL_PASSWORD", testSASLPassword)
		other := newTestCA(t)
		path := writeFile(t, "herald.yaml", "brokers: "+b.addr+"\ntopic-prefix: scram.\nkafka-tls-ca-file: "+other.caFile+
			"\nkafka-sasl-mechanism: SCRAM-SHA-512\nkafka-sasl-user: herald512\n")
		var out, errb bytes.Buffer
		if code := run(t.Context(), []string{"topics", "verify", "--config", path}, &out, &errb); code == 0 ||
			!strings.Contains(errb.String(), "certificate signed by unknown authority") {
			t.Fatalf("exit %d, want a refused certificate: %s", code, errb.String())
		}
	})
	t.Run("herald dedupe runs on the SCRAM broker until ready, and stops", func(t *testing.T) {
		t.Setenv("HERALD_KAFKA_SASL_PASSWORD", testSASLPassword)
		ops := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
		path := config(t, "kafka-sasl-mechanism: SCRAM-SHA-512\nkafka-sasl-user: herald512\ninstance-id: scram-0\nmetrics-addr: "+ops+"\n")
		runUntilReady(t, ops, "dedupe", "--config", path)
	})
}
