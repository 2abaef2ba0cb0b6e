package resolve_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/journal/internal/archivetest"
	"github.com/pyrula/caseworker/journal/resolve"
	"github.com/pyrula/caseworker/journal/valkeyjournal"
	"github.com/pyrula/caseworker/runevent"
)

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// finishRun creates run id in j and finishes it complete.
func finishRun(t *testing.T, ctx context.Context, j journal.Journal, id string) {
	t.Helper()
	l, err := j.Create(ctx, journal.CreateParams{RunID: id, TargetName: "checkout", Owner: "resolve-test"})
	if err != nil {
		t.Fatalf("Create %s: %v", id, err)
	}
	if _, err := j.Finish(ctx, l, journal.Batch{Events: []journal.Event{{Kind: runevent.RunComplete}}}); err != nil {
		t.Fatalf("Finish %s: %v", id, err)
	}
}

// "memory:" opens an in-memory journal of its own: a run written there is
// read back, and another Open does not see it.
func TestOpenMemory(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	j, err := resolve.Open(ctx, resolve.Config{URL: resolve.MemoryURL})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	finishRun(t, ctx, j, "run_mem1")
	m, err := j.Meta(ctx, "run_mem1")
	if err != nil || m.Status != journal.StatusComplete {
		t.Fatalf("Meta: %+v, %v; want a complete run", m, err)
	}
	other, err := resolve.Open(ctx, resolve.Config{URL: resolve.MemoryURL})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Meta(ctx, "run_mem1"); !errors.Is(err, journal.ErrRunNotFound) {
		t.Fatalf("another memory journal: %v; want ErrRunNotFound", err)
	}
}

// A redis:// URL opens the journal in that Valkey, under the namespace:
// the run's keys are where valkeyjournal.Keys says. The client Open
// connected is closed by Close.
func TestOpenValkeyURL(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	url := testenv.ValkeyURL(t)
	ns := testenv.UniqueName(t, "jresolve")
	c := testenv.ValkeyClientAt(t, url, ns)
	j, err := resolve.Open(ctx, resolve.Config{URL: url, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	finishRun(t, ctx, j, "run_v1")
	meta, _, _ := valkeyjournal.Keys(ns, "run_v1")
	if n, err := c.Do(ctx, c.B().Exists().Key(meta).Build()).AsInt64(); err != nil || n != 1 {
		t.Fatalf("EXISTS %s = %d, %v; want the run's meta in Valkey", meta, n, err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Meta(ctx, "run_v1"); err == nil {
		t.Fatal("Meta after Close succeeded: the client Open connected is still open")
	}
	if err := j.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// A Client given in the Config is used, with its namespace and completed
// TTL, and is not closed by Close.
func TestOpenGivenClient(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	url := testenv.ValkeyURL(t)
	ns := testenv.UniqueName(t, "jresolve")
	c := testenv.ValkeyClientAt(t, url, ns)
	j, err := resolve.Open(ctx, resolve.Config{URL: url, Client: c, Namespace: ns, CompletedTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	finishRun(t, ctx, j, "run_c1")
	j.Close()
	meta, _, _ := valkeyjournal.Keys(ns, "run_c1")
	ttl, err := c.Do(ctx, c.B().Pttl().Key(meta).Build()).AsInt64()
	if err != nil {
		t.Fatalf("PTTL after Close: %v; the given client must stay open", err)
	}
	if ttl <= 0 || ttl > time.Hour.Milliseconds() {
		t.Fatalf("PTTL %s = %d ms; want the completed TTL, at most an hour", meta, ttl)
	}
}

// With an archive DSN, a finished run is archived and a journal opened
// later on the same archive reads it from there.
func TestOpenArchive(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	ns := testenv.UniqueName(t, "jresolve")
	archivetest.New(t, ns) // migrates the test database; deletes ns's runs at the end
	dsn := testenv.PostgresDSN(t)
	j, err := resolve.Open(ctx, resolve.Config{URL: resolve.MemoryURL, Namespace: ns, ArchiveDSN: dsn})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	finishRun(t, ctx, j, "run_a1")
	later, err := resolve.Open(ctx, resolve.Config{URL: resolve.MemoryURL, Namespace: ns, ArchiveDSN: dsn})
	if err != nil {
		t.Fatal(err)
	}
	defer later.Close()
	r, err := later.Run(ctx, "run_a1")
	if err != nil {
		t.Fatalf("Run from the archive: %v", err)
	}
	if r.Meta.Status != journal.StatusComplete || r.Meta.Origin != journal.OriginArchive {
		t.Fatalf("meta %+v; want a complete run read from the archive", r.Meta)
	}
}

// What Open refuses: a URL of no journal backend, an archive it cannot
// reach, a bad namespace. No error shows a password.
func TestOpenRefuses(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	cases := []struct {
		name string
		cfg  resolve.Config
		want string
	}{
		{"http URL", resolve.Config{URL: "http://user:s3cret@127.0.0.1/"}, "PYRULA_VALKEY_URL"},
		{"file URL", resolve.Config{URL: "file:///tmp/journal"}, "PYRULA_VALKEY_URL"},
		{"unreachable archive", resolve.Config{URL: resolve.MemoryURL, ArchiveDSN: "postgres://user:s3cret@127.0.0.1:1/db?connect_timeout=5"}, "PYRULA_POSTGRES_DSN"},
		{"namespace", resolve.Config{URL: resolve.MemoryURL, Namespace: "has space"}, "namespace"},
	}
	for _, c := range cases {
		j, err := resolve.Open(ctx, c.cfg)
		if err == nil {
			j.Close()
			t.Errorf("%s: opened", c.name)
			continue
		}
		if !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: %v; want an error naming %s without the password", c.name, err, c.want)
		}
	}
	if _, err := resolve.Open(ctx, resolve.Config{URL: "http://127.0.0.1/"}); !errors.Is(err, resolve.ErrInvalidURL) {
		t.Errorf("http URL: %v; want ErrInvalidURL", err)
	}
}

// The journal Open returns reads a run's last events alone (a suite's
// coordinator reads its children's outcomes so), and its meta with its
// first events (a worker reads how a run was submitted so), on every
// backend.
func TestOpenedJournalReadsTailsAndHeads(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	for _, url := range []string{resolve.MemoryURL, testenv.ValkeyURL(t)} {
		j, err := resolve.Open(ctx, resolve.Config{URL: url, Namespace: testenv.UniqueName(t, "jresolve")})
		if err != nil {
			t.Fatal(err)
		}
		defer j.Close()
		var tr journal.TailReader = j
		finishRun(t, ctx, j, "run_tail")
		all, _, err := j.Events(ctx, "run_tail")
		if err != nil || len(all) < 2 {
			t.Fatalf("%s: Events: %d events, %v", url, len(all), err)
		}
		last, err := tr.Tail(ctx, "run_tail", 1)
		if err != nil || len(last) != 1 || last[0].Kind != runevent.RunComplete || last[0].RunSeq != all[len(all)-1].RunSeq {
			t.Fatalf("%s: Tail(1) = %+v, %v; want the run's run:complete, run_seq %d", url, last, err, all[len(all)-1].RunSeq)
		}
		if _, err := tr.Tail(ctx, "run_missing", 1); !errors.Is(err, journal.ErrRunNotFound) {
			t.Fatalf("%s: Tail of a missing run: %v; want ErrRunNotFound", url, err)
		}
		var hr journal.HeadReader = j
		meta, first, err := hr.Head(ctx, "run_tail", 1)
		if err != nil || meta.RunID != "run_tail" || meta.LastSeq != all[len(all)-1].RunSeq || len(first) != 1 || first[0].Kind != runevent.RunSubmitted {
			t.Fatalf("%s: Head(1) = %+v, %+v, %v; want the run's meta and its run:submitted", url, meta, first, err)
		}
		if _, _, err := hr.Head(ctx, "run_missing", 1); !errors.Is(err, journal.ErrRunNotFound) {
			t.Fatalf("%s: Head of a missing run: %v; want ErrRunNotFound", url, err)
		}
	}
}
