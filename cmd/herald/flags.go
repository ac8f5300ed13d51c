package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

// newFlagSet returns a flag set for one subcommand whose errors are returned,
// not printed and exited on.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("herald "+name, flag.ContinueOnError)
	return fs
}

// parseFlags parses args, then fills every flag not given on the command line
// from its environment variable (HERALD_ + upper-cased name, dashes as
// underscores). A bad environment value is an error naming the variable.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || err != nil {
			return
		}
		env := envName(f.Name)
		if v, ok := os.LookupEnv(env); ok {
			if e := f.Value.Set(v); e != nil {
				err = fmt.Errorf("%w: environment %s=%q: %v", errUsage, env, v, e)
			}
		}
	})
	return err
}

func envName(flagName string) string {
	return "HERALD_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}
