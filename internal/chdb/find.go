package chdb

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// LibEnv names the environment variable that points at libchdb.so.
const LibEnv = "HERALD_CHDB_LIB"

// LibRelPath is where `scripts/clickhouse/clickhouse install` puts
// libchdb.so, relative to the repository root.
const LibRelPath = ".cache/chdb/node_modules/@chdb/lib-linux-x64-gnu/libchdb.so"

// ErrLibNotFound is returned (wrapped) by FindLib when libchdb.so is nowhere
// to be found.
var ErrLibNotFound = errors.New("libchdb.so not found")

// FindLib returns the path of libchdb.so: $HERALD_CHDB_LIB if set (it must
// exist), else the first <dir>/.cache/chdb/node_modules/@chdb/lib-linux-x64-gnu/libchdb.so
// where <dir> is the working directory, the executable's directory, or one of
// their parents (so it works from any package directory in tests and for a
// binary built into <repo>/.cache/bin). The error says how to install it.
func FindLib() (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		starts = append(starts, filepath.Dir(exe))
	}
	return findLib(os.Getenv(LibEnv), starts)
}

func findLib(env string, starts []string) (string, error) {
	if env != "" {
		if _, err := os.Stat(env); err != nil {
			return "", fmt.Errorf("chdb: %s=%s: %w: %w; unset it, or point it at an existing libchdb.so", LibEnv, env, ErrLibNotFound, err)
		}
		return env, nil
	}
	var looked []string
	seen := map[string]bool{}
	for _, start := range starts {
		if seen[filepath.Clean(start)] {
			continue
		}
		looked = append(looked, start)
		for dir := filepath.Clean(start); ; dir = filepath.Dir(dir) {
			if !seen[dir] {
				seen[dir] = true
				p := filepath.Join(dir, filepath.FromSlash(LibRelPath))
				if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
					return p, nil
				}
			}
			if parent := filepath.Dir(dir); parent == dir {
				break
			}
		}
	}
	return "", fmt.Errorf("chdb: %w: %s is unset and no %s exists in %s or a parent directory; "+
		"install it with `scripts/clickhouse/clickhouse install` (npm @chdb/lib-linux-x64-gnu@%s into <repo>/.cache/chdb), "+
		"or set %s to its path",
		ErrLibNotFound, LibEnv, LibRelPath, strings.Join(looked, " or "), Version, LibEnv)
}
