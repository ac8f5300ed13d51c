package web

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// workspace copies the npm project (sources, tests, configs) into a fresh
// directory beside the pinned toolchain that scripts/install.d/sdk-web
// installs, so the tests neither need nor touch sdk/web/node_modules.
func workspace(t *testing.T) string {
	t.Helper()
	modules, err := filepath.Abs(filepath.Join("..", "..", ".cache", "sdk-web", "node_modules"))
	if err != nil {
		t.Fatal(err)
	}
	_, errModules := os.Stat(filepath.Join(modules, "typescript"))
	_, errNode := exec.LookPath("node")
	if (errModules != nil || errNode != nil) && testing.Short() {
		t.Skip("the web client's npm toolchain or node is not installed: skipped under -short (scripts/install installs both)")
	}
	if errModules != nil {
		t.Fatalf("the web client's npm toolchain is not installed (run scripts/install.d/sdk-web): %v", errModules)
	}
	if errNode != nil {
		t.Fatalf("node is required for the web client's tests (scripts/install installs it): %v", errNode)
	}
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(".")); err != nil {
		t.Fatal(err)
	}
	for _, stale := range []string{"node_modules", "build", "dist"} {
		if err := os.RemoveAll(filepath.Join(dir, stale)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(modules, filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	return dir
}

func npm(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("npm", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("npm %v: %v\n%s", args, err, out)
	}
	t.Logf("npm %v:\n%s", args, out)
}

// TestSources runs the TypeScript unit tests (test/*.test.ts: the seen-set
// on fake-indexeddb, the push decision; compiling them type-checks all of
// src/) under node --test, and rebuilds dist/ with the pinned esbuild: the
// committed files herald embeds must be exactly what the sources build to.
func TestSources(t *testing.T) {
	dir := workspace(t)
	t.Run("the unit tests pass under node --test", func(t *testing.T) {
		npm(t, dir, "test")
	})
	t.Run("the embedded dist files are what the sources build to", func(t *testing.T) {
		npm(t, dir, "run", "bundle")
		for _, name := range []string{ServiceWorker, PageHelper} {
			built, err := os.ReadFile(filepath.Join(dir, "dist", name))
			if err != nil {
				t.Fatal(err)
			}
			committed, err := dist.ReadFile("dist/" + name)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(built, committed) {
				t.Errorf("dist/%s is stale: run `npm run build` in sdk/web and commit dist/", name)
			}
		}
	})
}

func TestHandler(t *testing.T) {
	srv := httptest.NewServer(Handler())
	defer srv.Close()
	for _, c := range []struct {
		name, method, path string
		status             int
		swAllowed          string
	}{
		{"the service worker is served, allowed to control the whole origin", "GET", "/sdk/herald-sw.js", 200, "/"},
		{"the page helper is served", "GET", "/sdk/herald.js", 200, ""},
		{"another file under /sdk/ is not found", "GET", "/sdk/web.go", 404, ""},
		{"a POST is refused", "POST", "/sdk/herald.js", 404, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(c.method, srv.URL+c.path, nil)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			body, _ := io.ReadAll(res.Body)
			if res.StatusCode != c.status {
				t.Fatalf("status %d, want %d", res.StatusCode, c.status)
			}
			if got := res.Header.Get("Service-Worker-Allowed"); got != c.swAllowed {
				t.Errorf("Service-Worker-Allowed %q, want %q", got, c.swAllowed)
			}
			if c.status == 200 {
				if ct := res.Header.Get("Content-Type"); ct != "text/javascript; charset=utf-8" {
					t.Errorf("Content-Type %q", ct)
				}
				want, _ := dist.ReadFile("dist/" + c.path[len(Prefix):])
				if !bytes.Equal(body, want) {
					t.Errorf("body is not dist%s", c.path[len(Prefix)-1:])
				}
			}
		})
	}
}

func TestDemo(t *testing.T) {
	srv := httptest.NewServer(Demo())
	defer srv.Close()
	for _, c := range []struct {
		name, path string
		status     int
	}{
		{"the demo page is served at /", "/", 200},
		{"nothing else is", "/index.html", 404},
	} {
		t.Run(c.name, func(t *testing.T) {
			res, err := http.Get(srv.URL + c.path)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			body, _ := io.ReadAll(res.Body)
			if res.StatusCode != c.status {
				t.Fatalf("status %d, want %d", res.StatusCode, c.status)
			}
			if c.status == 200 && (res.Header.Get("Content-Type") != "text/html; charset=utf-8" || !bytes.Contains(body, []byte(`from "/sdk/herald.js"`))) {
				t.Fatalf("%s: %.200s", res.Header.Get("Content-Type"), body)
			}
		})
	}
}
