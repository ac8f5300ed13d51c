package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The configuration file is YAML (go.yaml.in/yaml/v3, the YAML
// organisation's maintained yaml.v3, already herald's YAML library): it
// takes comments, so operators can say why a value is what it is next to
// it; it is what Kubernetes ConfigMaps and Helm values hold; and its node
// API gives the line of every key, so a bad one is named with its place.
// A JSON file is YAML too and reads the same.
//
// The file is one flat mapping, flag name to value, for every role:
//
//	brokers: [kafka-1:9092, kafka-2:9092]   # a list is joined with commas
//	kafka-sasl-mechanism: SCRAM-SHA-512
//	type-windows: {invoice.paid: 24h}       # a map becomes invoice.paid=24h
//
// so a key means exactly what the flag of the same name means (see a
// command's -h), and HERALD_ + its name overrides it.

// configFile is a parsed configuration file.
type configFile struct {
	path     string
	settings []setting
}

// setting is one key of the file: its flag value as text, or why it has
// none.
type setting struct {
	key, value string
	line       int
	err        error
}

func (c *configFile) where(s setting) string {
	return fmt.Sprintf("%s line %d", c.path, s.line)
}

// loadConfigFile reads and parses path. An error means the file as a whole
// cannot be read; a bad value of one key is that setting's err.
func loadConfigFile(path string) (*configFile, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return parseConfig(path, raw)
}

func parseConfig(path string, raw []byte) (*configFile, error) {
	c := &configFile{path: path}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return c, nil // an empty file sets nothing
		}
		return nil, fmt.Errorf("config: %s is not YAML: %v", path, err)
	}
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		// A second document (after ---) would be ignored: refuse it.
		return nil, fmt.Errorf("config: %s: holds more than one YAML document (a second starts at line %d): herald reads one mapping of settings", path, next.Line)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("config: %s: want a mapping of setting names to values, e.g. 'brokers: kafka-1:9092'", path)
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		s := setting{key: k.Value, line: k.Line}
		if first, dup := seen[k.Value]; dup {
			s.err = fmt.Errorf("is set twice (first on line %d)", first)
		} else {
			seen[k.Value] = k.Line
			s.value, s.err = flagText(v)
		}
		c.settings = append(c.settings, s)
	}
	return c, nil
}

// flagText turns a YAML value into the flag's text: a scalar as written, a
// list of scalars joined with commas, a map of scalars as k=v,k=v.
func flagText(v *yaml.Node) (string, error) {
	switch v.Kind {
	case yaml.AliasNode:
		return flagText(v.Alias)
	case yaml.ScalarNode:
		if v.Tag == "!!null" {
			return "", errors.New("has no value (write \"\" for an empty one)")
		}
		return v.Value, nil
	case yaml.SequenceNode:
		var parts []string
		for _, e := range v.Content {
			if e.Kind != yaml.ScalarNode {
				return "", errors.New("is a list of something other than plain values")
			}
			parts = append(parts, e.Value)
		}
		return strings.Join(parts, ","), nil
	case yaml.MappingNode:
		var parts []string
		for i := 0; i+1 < len(v.Content); i += 2 {
			k, e := v.Content[i], v.Content[i+1]
			if e.Kind != yaml.ScalarNode {
				return "", fmt.Errorf("%s: is not a plain value", k.Value)
			}
			parts = append(parts, k.Value+"="+e.Value)
		}
		return strings.Join(parts, ","), nil
	}
	return "", errors.New("is not a value")
}

// runConfig implements `herald config check --config FILE`: it applies
// the file and the HERALD_* environment to every command's flags, as each
// command would at its start, runs every check, and prints every bad
// setting in plain words; it exits 1 when there is one.
func runConfig(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 || args[0] != "check" {
		return fmt.Errorf("%w: want 'herald config check --config FILE'", errUsage)
	}
	fs := newFlagSet("config check")
	words, err := parseArgs(fs, args[1:])
	if err != nil {
		return err
	}
	path := fs.Lookup(configFlag).Value.String()
	if path == "" {
		path = os.Getenv(envName(configFlag))
	}
	if path == "" || len(words) > 0 {
		return fmt.Errorf("%w: want 'herald config check --config FILE'", errUsage)
	}
	rep, err := checkConfig(path, os.LookupEnv)
	if err != nil {
		return err
	}
	if _, err := io.WriteString(stdout, rep.String()); err != nil {
		return err
	}
	if len(rep.problems) > 0 {
		return fmt.Errorf("%s: %d bad setting(s)", path, len(rep.problems))
	}
	return nil
}

// configReport is what `herald config check` found.
type configReport struct {
	path     string
	problems []problem
	// readers lists, per key of the file, the commands that read it.
	readers map[string][]string
	values  map[string]string
	order   []string
}

// checkConfig applies path and the environment to every command's flags
// and collects every problem, each once.
func checkConfig(path string, lookupEnv func(string) (string, bool)) (*configReport, error) {
	file, err := loadConfigFile(path)
	if err != nil {
		return nil, err
	}
	rep := &configReport{path: path, readers: map[string][]string{}, values: map[string]string{}}
	for _, s := range file.settings {
		if _, dup := rep.values[s.key]; !dup {
			rep.order = append(rep.order, s.key)
			rep.values[s.key] = s.value
		}
	}
	names := commandPaths()
	sort.Strings(names)
	seen := map[string]bool{}
	for _, n := range names {
		fresh := freshFlagSet(n)
		if fresh == nil {
			continue
		}
		if err := fresh.Set(configFlag, path); err != nil {
			return nil, err
		}
		for _, p := range applySources(fresh, lookupEnv) {
			if k := p.String(); !seen[k] {
				seen[k] = true
				rep.problems = append(rep.problems, p)
			}
		}
		for _, s := range rep.order {
			if fresh.Lookup(s) != nil && s != configFlag {
				rep.readers[s] = append(rep.readers[s], n)
			}
		}
	}
	sortProblems(rep.problems)
	return rep, nil
}

// freshFlagSet makes the flag set of the command path name, with its
// checks registered, without running the command.
func freshFlagSet(name string) *flag.FlagSet {
	var got *flag.FlagSet
	registry.mu.Lock()
	registry.observe = func(n string, fs *flag.FlagSet) {
		if n == name && got == nil {
			fs.SetOutput(io.Discard)
			got = fs
		}
	}
	registry.mu.Unlock()
	defer func() {
		registry.mu.Lock()
		registry.observe = nil
		registry.mu.Unlock()
	}()
	words := strings.Fields(name)
	for _, c := range commands() {
		if c.name == words[0] {
			_ = c.run(context.Background(), append(words[1:], "-h"), io.Discard)
		}
	}
	return got
}

func (r *configReport) String() string {
	var b strings.Builder
	if len(r.problems) == 0 {
		fmt.Fprintf(&b, "%s is valid: %d setting(s).\n", r.path, len(r.order))
	} else {
		fmt.Fprintf(&b, "%s has %d bad setting(s):\n", r.path, len(r.problems))
		for _, p := range r.problems {
			fmt.Fprintf(&b, "  %s\n", p.plain())
		}
		b.WriteString("\nSettings read:\n")
	}
	for _, k := range r.order {
		rs := r.readers[k]
		if len(rs) == 0 {
			continue
		}
		v := fmt.Sprintf("%q", r.values[k])
		if secretFlags[k] {
			v = "set (a secret, not shown)"
		}
		fmt.Fprintf(&b, "  %s = %s, read by %s\n", k, v, strings.Join(rs, ", "))
	}
	return b.String()
}

// plain is the problem in the words of `herald config check`: the setting,
// where it is, what is wrong.
func (p problem) plain() string {
	switch {
	case p.field == "":
		return p.msg
	case p.source == "":
		return fmt.Sprintf("%s: %s", p.field, p.msg)
	}
	return fmt.Sprintf("%s (%s): %s", p.field, p.source, p.msg)
}
