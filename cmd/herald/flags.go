package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/heraldhq/herald/schemas"
)

// The configuration of every subcommand is its flags, and there is one way
// to set each one, from three places. In order of precedence:
//
//  1. the command line: --brokers kafka-1:9092
//  2. the environment: HERALD_BROKERS=kafka-1:9092 (HERALD_ + the name in
//     upper case, dashes as underscores)
//  3. the configuration file named by --config (or HERALD_CONFIG), a YAML
//     mapping whose keys are flag names: brokers: kafka-1:9092
//  4. the flag's default.
//
// One file serves every role: a key that is a flag of another subcommand is
// ignored by the roles that do not have it, a key that is no subcommand's
// flag is an error everywhere. Each flag group registers checks of its
// values (addCheck); parseFlags runs them and reports every bad setting,
// not just the first, as `herald config check` does for a file.

// newFlagSet returns a flag set for one subcommand whose errors are returned,
// not printed and exited on. name is the command's path ("dedupe", "topics
// create"); its help shows the command's summary, its example (examples)
// and its flags. Every flag set takes --config.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("herald "+name, flag.ContinueOnError)
	fs.String(configFlag, "", "YAML file of settings, one 'flag-name: value' a key (lists and maps allowed); the command line and HERALD_* win over it")
	fs.Usage = func() { printHelp(fs.Output(), name, fs) }
	registry.mu.Lock()
	observe := registry.observe
	registry.mu.Unlock()
	if observe != nil {
		observe(name, fs)
	}
	return fs
}

// configFlag is the flag (and HERALD_CONFIG) naming the configuration file.
const configFlag = "config"

// registry holds the checks each flag group registers, and the observer
// that `herald config check` and the help test set to collect every
// command's flag set.
var registry struct {
	mu      sync.Mutex
	checks  map[*flag.FlagSet][]func() error
	observe func(name string, fs *flag.FlagSet)
}

// addCheck registers a check of fs's values, run by parseFlags once every
// source is applied. It returns nil or errors naming the field (badField),
// joined when several are bad.
func addCheck(fs *flag.FlagSet, check func() error) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if registry.checks == nil {
		registry.checks = map[*flag.FlagSet][]func() error{}
	}
	registry.checks[fs] = append(registry.checks[fs], check)
}

// atLeast registers the check that the int flag name is at least min, so
// that a bad value is refused (by the command and by herald config check)
// instead of being taken for "the default" further down.
func atLeast[T int | int64](fs *flag.FlagSet, name string, v *T, min T) {
	addCheck(fs, func() error {
		if *v < min {
			return badField(name, "must be at least %d, got %d", min, *v)
		}
		return nil
	})
}

// positive registers the check that the duration flag name is positive.
func positive(fs *flag.FlagSet, name string, d *time.Duration) {
	addCheck(fs, func() error {
		if *d <= 0 {
			return badField(name, "must be positive, got %v", *d)
		}
		return nil
	})
}

// notEmpty registers the check that the string flag name is not empty.
func notEmpty(fs *flag.FlagSet, name string, s *string) {
	addCheck(fs, func() error {
		if *s == "" {
			return badField(name, "is empty")
		}
		return nil
	})
}

// listenAddr registers the check that the flag name is an address to
// listen on, host:port (":9464", "127.0.0.1:0"); empty when optional.
func listenAddr(fs *flag.FlagSet, name string, addr *string, optional bool) {
	addCheck(fs, func() error {
		if *addr == "" && optional {
			return nil
		}
		if err := checkHostPort(*addr, true); err != nil {
			return badField(name, "%v", err)
		}
		return nil
	})
}

// checkHostPort reports whether addr is host:port with a port number
// (0 only to listen on: any free port); a dial address needs a port from 1
// to 65535, a listen address may leave the host empty (every interface).
func checkHostPort(addr string, listen bool) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port", addr)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	switch {
	case err != nil:
		return fmt.Errorf("%q: the port %q is not a number from 0 to 65535", addr, port)
	case !listen && (n == 0 || host == ""):
		return fmt.Errorf("%q: want a host and a port from 1 to 65535", addr)
	}
	return nil
}

// takeChecks returns and forgets fs's checks.
func takeChecks(fs *flag.FlagSet) []func() error {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	c := registry.checks[fs]
	delete(registry.checks, fs)
	return c
}

// fieldError is a bad value of one setting.
type fieldError struct{ field, msg string }

func (e *fieldError) Error() string { return "--" + e.field + " " + e.msg }

// badField returns the error of a bad value of the flag named field.
func badField(field, format string, args ...any) error {
	return &fieldError{field: field, msg: fmt.Sprintf(format, args...)}
}

// parseFlags parses args, then fills every flag not given on the command line
// from its environment variable, then every flag still unset from the
// configuration file, then runs the flag set's checks. It reports every bad
// setting (each naming its flag and where its value came from), not just the
// first.
//
// A command takes flags only: a word that is not a flag is refused (Go's
// flag package would stop at it and ignore every flag after it).
func parseFlags(fs *flag.FlagSet, args []string) error {
	words, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(words) > 0 {
		return fmt.Errorf("%w: unexpected argument %q: %s takes flags only", errUsage, words[0], fs.Name())
	}
	return applyAndCheck(fs)
}

// parseFlagsAndWords is parseFlags for a command that also takes words
// (herald probe URL): they may stand before, between or after the flags,
// and are returned in order for the command to check.
func parseFlagsAndWords(fs *flag.FlagSet, args []string) ([]string, error) {
	words, err := parseArgs(fs, args)
	if err != nil {
		return nil, err
	}
	return words, applyAndCheck(fs)
}

// applyAndCheck applies the environment and the file to the flags the
// command line left unset and runs the checks: every bad setting in one
// error.
func applyAndCheck(fs *flag.FlagSet) error {
	probs := applySources(fs, os.LookupEnv)
	sortProblems(probs)
	if len(probs) == 0 {
		return nil
	}
	var b strings.Builder
	if len(probs) == 1 {
		b.WriteString(probs[0].String())
	} else {
		fmt.Fprintf(&b, "%d bad settings:", len(probs))
		for _, p := range probs {
			b.WriteString("\n  " + p.String())
		}
	}
	return fmt.Errorf("%w: %s", errUsage, b.String())
}

// parseArgs parses the command line alone: its flags, and its words
// (returned in order) before, between or after them. A bad flag is
// reported once, with a pointer to -h, not followed by the whole help as
// the flag package prints it; -h prints the help.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	if err := checkIntegers(fs, args); err != nil {
		return nil, err
	}
	out := fs.Output()
	fs.SetOutput(io.Discard)
	var words []string
	var err error
	for {
		if err = fs.Parse(args); err != nil || fs.NArg() == 0 {
			break
		}
		words = append(words, fs.Arg(0))
		args = fs.Args()[1:]
	}
	fs.SetOutput(out)
	switch {
	case err == flag.ErrHelp:
		fs.Usage()
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("%w: %v (run '%s -h' for its flags)", errUsage, err, fs.Name())
	}
	return words, nil
}

// decimal matches an integer flag's text in base 10. The flag package
// reads integers in any base Go's syntax names: "010" would be 8, which
// for --partitions is a topic layout that cannot be undone.
var decimal = regexp.MustCompile(`^[+-]?(0|[1-9][0-9]*)$`)

// integerFlag reports whether f holds an integer (flag.Int, Int64, Uint,
// Uint64: the flag package's unexported values).
func integerFlag(f *flag.Flag) bool {
	switch fmt.Sprintf("%T", f.Value) {
	case "*flag.intValue", "*flag.int64Value", "*flag.uintValue", "*flag.uint64Value":
		return true
	}
	return false
}

// otherBase is the problem of an integer flag's text that the flag package
// would read in another base than 10 (see decimal), or "".
func otherBase(f *flag.Flag, text string) string {
	if integerFlag(f) && !decimal.MatchString(text) {
		if _, err := strconv.ParseInt(text, 0, 64); err == nil {
			return fmt.Sprintf("= %q is not a decimal integer (a leading 0, 0x, 0o or 0b is read in another base)", text)
		}
	}
	return ""
}

// setFlag sets f from the environment or the file: "" or what is wrong.
func setFlag(f *flag.Flag, text string) string {
	if msg := otherBase(f, text); msg != "" {
		return msg
	}
	if err := f.Value.Set(text); err != nil {
		return setError(f, text, err)
	}
	return ""
}

// checkIntegers refuses an integer flag on the command line whose text is
// not base 10 (see decimal), before the flag package reads it in another
// base. It follows the flag package's syntax: -name=value, -name value
// (but for booleans), words, and -- that ends the flags.
func checkIntegers(fs *flag.FlagSet, args []string) error {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return nil
		}
		if len(a) < 2 || a[0] != '-' {
			continue
		}
		name, val, hasVal := strings.Cut(strings.TrimPrefix(a[1:], "-"), "=")
		f := fs.Lookup(name)
		if f == nil {
			continue
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			continue
		}
		if !hasVal {
			if i+1 == len(args) {
				return nil // the flag package reports the missing value
			}
			i++
			val = args[i]
		}
		if msg := otherBase(f, val); msg != "" {
			return fmt.Errorf("%w: --%s %s", errUsage, name, msg)
		}
	}
	return nil
}

// problem is one bad setting: the field (empty when the problem is the file
// as a whole), where its value came from, and what is wrong.
type problem struct {
	field, source, msg string
	// line is the file's line of the field, 0 when it is not from the file.
	line int
}

func (p problem) String() string {
	s := p.msg
	if p.field != "" {
		s = "--" + p.field + " " + p.msg
	}
	if p.source != "" {
		s += " (" + p.source + ")"
	}
	return s
}

// applySources applies the environment and the configuration file to the
// flags the command line left unset, then runs fs's checks, and returns
// every problem.
func applySources(fs *flag.FlagSet, lookupEnv func(string) (string, bool)) []problem {
	var probs []problem
	source := map[string]string{}
	line := map[string]int{}
	fs.Visit(func(f *flag.Flag) { source[f.Name] = "--" + f.Name })
	fs.VisitAll(func(f *flag.Flag) {
		if source[f.Name] != "" {
			return
		}
		env := envName(f.Name)
		v, ok := lookupEnv(env)
		if !ok {
			return
		}
		source[f.Name] = "environment " + env
		if msg := setFlag(f, v); msg != "" {
			probs = append(probs, problem{f.Name, source[f.Name], msg, 0})
		}
	})
	if path := fs.Lookup(configFlag).Value.String(); path != "" {
		file, err := loadConfigFile(path)
		if err != nil {
			return append(probs, problem{msg: err.Error()})
		}
		known := knownSettings()
		for _, s := range file.settings {
			f := fs.Lookup(s.key)
			switch {
			case s.err != nil:
				probs = append(probs, problem{s.key, file.where(s), s.err.Error(), s.line})
			case s.key == configFlag:
				probs = append(probs, problem{s.key, file.where(s), "cannot be set in the file itself", s.line})
			case f == nil && !known[s.key]:
				probs = append(probs, problem{s.key, file.where(s), "is not a setting of any herald command" + suggest(s.key, known), s.line})
			case f == nil || source[s.key] != "":
				// another command's setting, or set on the command line or in the environment
			default:
				source[s.key], line[s.key] = file.where(s), s.line
				if msg := setFlag(f, s.value); msg != "" {
					probs = append(probs, problem{s.key, source[s.key], msg, s.line})
				}
			}
		}
	}
	// The checks run even when a value could not be set, so that every bad
	// setting is named at once; a field already named is not named again.
	named := map[string]bool{}
	for _, p := range probs {
		named[p.field] = true
	}
	for _, check := range takeChecks(fs) {
		for _, err := range unjoin(check()) {
			var fe *fieldError
			switch {
			case !errors.As(err, &fe):
				probs = append(probs, problem{msg: err.Error()})
			case !named[fe.field]:
				probs = append(probs, problem{fe.field, source[fe.field], fe.msg, line[fe.field]})
			}
		}
	}
	return probs
}

// sortProblems orders problems by their line in the file, the others last.
func sortProblems(probs []problem) {
	sort.SliceStable(probs, func(i, j int) bool {
		a, b := probs[i].line, probs[j].line
		return a != 0 && (b == 0 || a < b)
	})
}

// setError says why value is not a value of f (the flag package's own
// errors say little: "parse error").
func setError(f *flag.Flag, value string, err error) string {
	typ, _ := flag.UnquoteUsage(f)
	if typ == "" {
		typ = "value"
	}
	if typ == "value" {
		if _, ok := f.Value.(interface{ IsBoolFlag() bool }); ok {
			typ = "bool (true or false)"
		}
	}
	return fmt.Sprintf("= %s is not a valid %s: %v", shown(f.Name, value), typ, err)
}

// unjoin splits an errors.Join result into its errors.
func unjoin(err error) []error {
	if err == nil || err == errUsage {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, unjoin(e)...)
		}
		return out
	}
	return []error{err}
}

func envName(flagName string) string {
	return "HERALD_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// secretFlags are the settings whose values are secrets: no message, log or
// `herald config check` output shows them.
var secretFlags = map[string]bool{
	"clickhouse-password":       true,
	"kafka-sasl-password":       true,
	"apns-cert-password":        true,
	"webpush-vapid-private-key": true,
	"hash-key":                  true,
	"api-key":                   true, // herald bench api's key
	"secret":                    true, // herald emulate webhook's whsec_ secrets
	"email-smtp-password":       true,
	"password":                  true, // herald emulate smtp's AUTH password
}

// shown is how a value appears in a message: quoted, or hidden when the
// setting is a secret.
func shown(name, value string) string {
	if secretFlags[name] {
		return "(secret, not shown)"
	}
	return fmt.Sprintf("%q", value)
}

// commandFlagSets returns the flag set of every command path that has an
// example (see examples), made by freshFlagSet.
func commandFlagSets() map[string]*flag.FlagSet {
	out := map[string]*flag.FlagSet{}
	for _, path := range commandPaths() {
		if fs := freshFlagSet(path); fs != nil {
			takeChecks(fs)
			out[path] = fs
		}
	}
	return out
}

var known struct {
	once sync.Once
	set  map[string]bool
}

// knownSettings is every flag name of every command: the keys a
// configuration file may hold.
func knownSettings() map[string]bool {
	known.once.Do(func() {
		known.set = map[string]bool{}
		for _, fs := range commandFlagSets() {
			fs.VisitAll(func(f *flag.Flag) { known.set[f.Name] = true })
		}
	})
	return known.set
}

// suggest names the known setting closest to a misspelled key, if one is
// close.
func suggest(key string, known map[string]bool) string {
	best, bestD := "", 3
	names := make([]string, 0, len(known))
	for k := range known {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if d := editDistance(key, k); d < bestD {
			best, bestD = k, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %s?)", best)
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// formatFlag registers a flag naming the format a command writes records
// in that have two (schemas.Format: v2, the default, or v1) and its check.
func formatFlag(fs *flag.FlagSet, name, usage string) *string {
	v := fs.String(name, string(schemas.FormatBinary), usage)
	addCheck(fs, func() error {
		if _, err := schemas.ParseFormat(*v); err != nil {
			return badField(name, "must be v1 or v2, got %q", *v)
		}
		return nil
	})
	return v
}
