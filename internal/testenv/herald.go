package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var heraldBuild struct {
	once sync.Once
	path string
	err  error
	out  []byte
}

// Herald builds the herald binary once per test process and returns its
// path, for tests that run stages as real processes (and kill them).
func Herald(t testing.TB) string {
	t.Helper()
	heraldBuild.once.Do(func() {
		dir, err := os.MkdirTemp("", "herald-bin-")
		if err != nil {
			heraldBuild.err = err
			return
		}
		heraldBuild.path = filepath.Join(dir, "herald")
		cmd := exec.Command("go", "build", "-o", heraldBuild.path, "github.com/heraldhq/herald/cmd/herald")
		heraldBuild.out, heraldBuild.err = cmd.CombinedOutput()
	})
	if heraldBuild.err != nil {
		t.Fatalf("testenv: build herald: %v\n%s", heraldBuild.err, heraldBuild.out)
	}
	return heraldBuild.path
}
