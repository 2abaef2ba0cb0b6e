package daemon_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pyrula/caseworker/daemon"
	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/internal/testwait"
)

// envOf is a Getenv over m: the environment a test gives Options, leaving
// the process's own untouched.
func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// A bad value in the environment Options.Getenv reads stops serve with one
// line naming the variable, not its value, before anything is connected.
func TestGetenvBadValueStopsServe(t *testing.T) {
	t.Parallel()
	o := daemon.Options{Getenv: envOf(map[string]string{
		"PYRULA_CONCURRENCY": "abc", "PYRULA_VALKEY_URL": "redis://127.0.0.1:1/0", "PYRULA_CONSUMER_NAME": "c"})}
	// Were the variables read elsewhere, serve would start: the timeout
	// ends it.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := o.Main(ctx, []string{"serve"}, &stdout, &stderr)
	want := "error: invalid setting PYRULA_CONCURRENCY: not a valid int\n"
	if code != 1 || stderr.String() != want || stdout.Len() != 0 {
		t.Fatalf("exit %d, stdout %q, stderr %q; want exit 1 and %q", code, stdout.String(), stderr.String(), want)
	}
}

// db migrate reads PYRULA_POSTGRES_DSN through Getenv: without it, it says
// so; with it, it applies the archive's migrations to that database.
func TestGetenvDBMigrate(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	code := daemon.Options{Getenv: envOf(nil)}.Main(context.Background(), []string{"db", "migrate"}, &stdout, &stderr)
	if want := "error: db migrate: PYRULA_POSTGRES_DSN is not set\n"; code != 1 || stderr.String() != want {
		t.Fatalf("without the DSN: exit %d, stderr %q; want exit 1 and %q", code, stderr.String(), want)
	}
	dsn := testenv.PostgresDSN(t)
	stdout.Reset()
	stderr.Reset()
	code = daemon.Options{Getenv: envOf(map[string]string{"PYRULA_POSTGRES_DSN": dsn})}.Main(context.Background(), []string{"db", "migrate"}, &stdout, &stderr)
	if code != 0 || stderr.Len() != 0 || !strings.HasPrefix(stdout.String(), "applied ") {
		t.Fatalf("with the DSN: exit %d, stdout %q, stderr %q; want exit 0 and \"applied …\"", code, stdout.String(), stderr.String())
	}
}

// serve takes its whole configuration from Getenv: a worker started with a
// namespace, group and consumer name of its own reads that namespace's
// message stream as that consumer of that group, and shuts down cleanly
// when its context ends.
func TestGetenvConfiguresServe(t *testing.T) {
	t.Parallel()
	url := testenv.ValkeyURL(t)
	ns := testenv.UniqueName(t, "getenv")
	c := testenv.ValkeyClientAt(t, url, ns)
	o := daemon.Options{Getenv: envOf(map[string]string{
		"PYRULA_VALKEY_URL": url, "PYRULA_NAMESPACE": ns, "PYRULA_CONSUMER_NAME": "getenv-c1",
		"PYRULA_HTTP_ADDR": "127.0.0.1:0", "PYRULA_CONSUMER_GROUP": "getenv-group", "PYRULA_SHUTDOWN_GRACE": "5s"})}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- o.Main(ctx, []string{"serve"}, &stdout, &stderr) }()
	// The consumer exists once the read loop has read: Start has returned.
	testwait.Eventually(t, 30*time.Second, "consumer getenv-c1 of group getenv-group on "+ns+":case-messages", func() bool {
		select {
		case code := <-done:
			t.Fatalf("serve ended early with exit %d", code)
		default:
		}
		consumers, err := c.Do(context.Background(), c.B().XinfoConsumers().Key(ns+":case-messages").Group("getenv-group").Build()).ToArray()
		if err != nil {
			return false
		}
		for _, m := range consumers {
			if f, err := m.AsStrMap(); err == nil && f["name"] == "getenv-c1" {
				return true
			}
		}
		return false
	})
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("serve exited %d after its context ended; stderr:\n%s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not return within 30s of its context ending")
	}
}
