package resolve_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/store"
	"github.com/pyrula/caseworker/store/filestore"
	"github.com/pyrula/caseworker/store/memstore"
	"github.com/pyrula/caseworker/store/resolve"
)

// env is a fake getenv.
type env map[string]string

func (e env) get(k string) string { return e[k] }

func TestURLOrder(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		flag string
		env  env
		want string
	}{
		{"flag wins", "file:///flag", env{resolve.EnvFixtureStore: "file:///env", resolve.EnvPostgresDSN: "postgres://h/db"}, "file:///flag"},
		{"flag is trimmed", "  /flag  ", nil, "/flag"},
		{"then PYRULA_FIXTURE_STORE", "", env{resolve.EnvFixtureStore: "memory:", resolve.EnvPostgresDSN: "postgres://h/db"}, "memory:"},
		{"blank flag is unset", "   ", env{resolve.EnvFixtureStore: "memory:"}, "memory:"},
		{"then PYRULA_POSTGRES_DSN", "", env{resolve.EnvPostgresDSN: "postgres://u:pw@h/db"}, "postgres://u:pw@h/db"},
		{"blank env is unset", "", env{resolve.EnvFixtureStore: " ", resolve.EnvPostgresDSN: "postgresql://h/db"}, "postgresql://h/db"},
	}
	for _, tc := range tests {
		got, err := resolve.URL(tc.flag, tc.env.get)
		if err != nil || got != tc.want {
			t.Errorf("%s: URL = %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
}

func TestURLNoStore(t *testing.T) {
	t.Parallel()
	for _, e := range []env{nil, {resolve.EnvFixtureStore: "", resolve.EnvPostgresDSN: "  "}, {"PYRULA_OTHER": "memory:"}} {
		_, err := resolve.URL("", e.get)
		me := messages.AsError(err)
		if me == nil || me.Code != messages.NoFixtureStore {
			t.Fatalf("URL with nothing set (%v): %v, want no_fixture_store", e, err)
		}
		for _, hint := range []string{"--fixture-store", resolve.EnvFixtureStore, resolve.EnvPostgresDSN} {
			if !strings.Contains(me.Message, hint) {
				t.Errorf("no_fixture_store message %q does not mention %s", me.Message, hint)
			}
		}
		if me.Code.ExitStatus() != messages.ExitRefused {
			t.Errorf("no_fixture_store exits %d", me.Code.ExitStatus())
		}
	}
}

func TestURLRefusesANonURLPostgresDSN(t *testing.T) {
	t.Parallel()
	for _, dsn := range []string{"host=db password=topsecret dbname=x", "/srv/topsecret", "file:///topsecret", "s3://topsecret/x"} {
		_, err := resolve.URL("", env{resolve.EnvPostgresDSN: dsn}.get)
		if !errors.Is(err, store.ErrInvalidURL) {
			t.Errorf("URL with %s=%q: %v, want ErrInvalidURL", resolve.EnvPostgresDSN, dsn, err)
			continue
		}
		if msg := err.Error(); strings.Contains(msg, "topsecret") || !strings.Contains(msg, resolve.EnvPostgresDSN) {
			t.Errorf("error %q must name the variable and not show its value", msg)
		}
	}
}

func TestIdentity(t *testing.T) {
	t.Parallel()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ in, want string }{
		{"memory:", "memory:"},
		{"file:///srv/cases/", "file:///srv/cases"},
		{"/srv/cases", "file:///srv/cases"},
		{"cases", store.FileIdentity(filepath.Join(wd, "cases"))},
		{"postgres://u:pw@db.internal/pyrula?sslmode=verify-full", "postgres://db.internal:5432/pyrula"},
		{"postgresql://db.internal:5433/pyrula", "postgres://db.internal:5433/pyrula"},
		{"s3://bucket/prefix/?region=eu-west-1&endpoint_url=http%3A%2F%2F127.0.0.1%3A7070", "s3://bucket/prefix"},
	}
	for _, tc := range tests {
		got, err := resolve.Identity(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("Identity(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "nope://x", "s3://k:topsecret@bucket/p", "memory:x"} {
		if _, err := resolve.Identity(bad); !errors.Is(err, store.ErrInvalidURL) {
			t.Errorf("Identity(%q): %v, want ErrInvalidURL", bad, err)
		}
	}
}

func TestOpenMemory(t *testing.T) {
	t.Parallel()
	a, err := resolve.Open(t.Context(), "memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := resolve.Open(t.Context(), "memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, ok := a.(*memstore.Store); !ok || a == b {
		t.Errorf("Open(memory:) = %T %p and %p, want two separate memory stores", a, a, b)
	}
	if a.Identity() != "memory:" {
		t.Errorf("Identity = %q", a.Identity())
	}
}

func TestOpenFile(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	for _, u := range []string{
		"file://" + filepath.ToSlash(base) + "/a/",
		filepath.Join(base, "b"),
		"file://localhost" + filepath.ToSlash(base) + "/c",
	} {
		s, err := resolve.Open(t.Context(), u)
		if err != nil {
			t.Fatalf("Open(%q): %v", u, err)
		}
		defer s.Close()
		fs, ok := s.(*filestore.Store)
		if !ok {
			t.Fatalf("Open(%q) = %T, want a file store", u, s)
		}
		id, err := resolve.Identity(u)
		if err != nil || s.Identity() != id {
			t.Errorf("Open(%q).Identity() = %q, Identity(url) = %q, %v", u, s.Identity(), id, err)
		}
		if fi, err := os.Stat(fs.Dir()); err != nil || !fi.IsDir() {
			t.Errorf("Open(%q) did not create %s: %v", u, fs.Dir(), err)
		}
	}
}

// TestOpenRelativePath changes the working directory, so it is not parallel.
func TestOpenRelativePath(t *testing.T) {
	base := t.TempDir()
	t.Chdir(base)
	s, err := resolve.Open(t.Context(), "tests/cases")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want := filepath.Join(base, "tests", "cases")
	if got := s.(*filestore.Store).Dir(); got != want {
		t.Errorf("Dir = %q, want %q", got, want)
	}
	if s.Identity() != store.FileIdentity(want) {
		t.Errorf("Identity = %q", s.Identity())
	}
}

func TestOpenFileErrors(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := resolve.Open(t.Context(), file); err == nil {
		s.Close()
		t.Errorf("Open on a regular file succeeded")
	}
}

// TestOpenUnreachable: postgres:// and s3:// reach their backends; a server
// that is not there is a prompt, clear error naming the store and never its
// password. Only closed loopback ports are dialled.
func TestOpenUnreachable(t *testing.T) {
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_CONFIG_FILE", os.DevNull)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", os.DevNull)
	tests := []struct{ url, identity string }{
		{"postgres://pyrula:topsecret@127.0.0.1:1/pyrula?sslmode=disable&connect_timeout=2", "postgres://127.0.0.1:1/pyrula"},
		{"postgresql://127.0.0.1:1/pyrula?password=topsecret&connect_timeout=2", "postgres://127.0.0.1:1/pyrula"},
		{"s3://cases/ci?region=eu-west-1&endpoint_url=http://127.0.0.1:1", "s3://cases/ci"},
	}
	for _, tc := range tests {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		s, err := resolve.Open(ctx, tc.url)
		cancel()
		if s != nil || err == nil {
			t.Errorf("Open(%q) = %v, %v; want an error", tc.url, s, err)
			continue
		}
		if msg := err.Error(); strings.Contains(msg, "topsecret") || !strings.Contains(msg, tc.identity) {
			t.Errorf("Open(%q): %q should name the store %s and show no password", tc.url, msg, tc.identity)
		}
	}
}

func TestOpenInvalid(t *testing.T) {
	t.Parallel()
	for _, u := range []string{
		"",
		"redis://localhost:6379/0",
		"s3://AKIAEXAMPLE:topsecret@bucket/prefix",
		"postgres://u:topsecret@host:badport/db",
		"file://otherhost/srv",
		"host=db password=topsecret",
	} {
		s, err := resolve.Open(t.Context(), u)
		if s != nil || !errors.Is(err, store.ErrInvalidURL) {
			t.Errorf("Open(%q) = %v, %v; want ErrInvalidURL", u, s, err)
			continue
		}
		if strings.Contains(err.Error(), "topsecret") {
			t.Errorf("Open(%q): error %q shows a password", u, err)
		}
	}
}
