package pgarchive_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/journal/internal/archivetest"
	"github.com/pyrula/caseworker/journal/pgarchive"
	"github.com/pyrula/caseworker/runevent"
)

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// freshDatabase creates an empty database of its own and returns its DSN;
// it is dropped when t ends. It skips when the test role may not create
// databases.
func freshDatabase(t *testing.T) string {
	t.Helper()
	return testenv.FreshPostgresDatabase(t)
}

// pool opens a pool on dsn, closed when t ends.
func pool(t *testing.T, dsn string) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

func TestMigrations(t *testing.T) {
	t.Parallel()
	ms, err := pgarchive.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 || ms[0].Version != 1 || ms[0].Name != "0001_archive" || !strings.Contains(ms[0].SQL, "archive.runs") ||
		strings.Contains(ms[0].SQL, "CREATE TABLE archive.case_bundles") {
		t.Errorf("migrations = %+v", ms)
	}
}

// TestMigrateConcurrently runs Migrate from several processes' worth of
// pools at once on an empty database: every call succeeds, each migration is
// applied exactly once, and the schema is complete.
func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	dsn := freshDatabase(t)
	ctx := testCtx(t)
	const pools, perPool = 4, 3
	var mu sync.Mutex
	var applied []string
	var wg sync.WaitGroup
	errs := make(chan error, pools*perPool)
	for range pools {
		p := pool(t, dsn)
		for range perPool {
			wg.Add(1)
			go func() {
				defer wg.Done()
				names, err := pgarchive.Migrate(ctx, p)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				applied = append(applied, names...)
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent Migrate: %v", err)
	}
	ms, _ := pgarchive.Migrations()
	var want []string
	for _, m := range ms {
		want = append(want, "archive/"+m.Name)
	}
	slices.Sort(applied)
	if !slices.Equal(applied, want) {
		t.Errorf("migrations applied across all calls: %v, want each of %v once", applied, want)
	}
	p := pool(t, dsn)
	var versions []int
	rows, err := p.Query(ctx, "SELECT version FROM archive.schema_migrations ORDER BY version")
	if err != nil {
		t.Fatal(err)
	}
	if versions, err = pgx.CollectRows(rows, pgx.RowTo[int]); err != nil {
		t.Fatal(err)
	}
	if len(versions) != len(ms) {
		t.Errorf("schema_migrations holds %v", versions)
	}
	for _, table := range []string{"runs", "run_events", "run_results"} {
		var ok bool
		if err := p.QueryRow(ctx, "SELECT to_regclass('archive.' || $1) IS NOT NULL", table).Scan(&ok); err != nil || !ok {
			t.Errorf("table archive.%s missing (%v)", table, err)
		}
	}
	if err := pgarchive.Check(ctx, p); err != nil {
		t.Errorf("Check after Migrate: %v", err)
	}
	// Idempotent: a later run applies nothing.
	if names, err := pgarchive.Migrate(ctx, p); err != nil || len(names) != 0 {
		t.Errorf("Migrate of an up-to-date database applied %v, %v", names, err)
	}
}

// TestMigrateSharedDatabase runs Migrate concurrently on the shared test
// database (already migrated, or migrated by whichever call comes first).
func TestMigrateSharedDatabase(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	var wg sync.WaitGroup
	for range 4 {
		p := archivetest.Pool(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := pgarchive.Migrate(ctx, p); err != nil {
				t.Errorf("Migrate: %v", err)
			}
		}()
	}
	wg.Wait()
}

// TestNotMigrated: an archive on a database without the schema refuses every
// call with ErrNotMigrated, whose message says what to run.
func TestNotMigrated(t *testing.T) {
	t.Parallel()
	dsn := freshDatabase(t)
	ctx := testCtx(t)
	p := pool(t, dsn)
	a := pgarchive.New(p)
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, pgarchive.ErrNotMigrated) {
			t.Errorf("%s before migrate: %v, want ErrNotMigrated", what, err)
		} else if !strings.Contains(err.Error(), "pyrula db migrate") {
			t.Errorf("%s before migrate: %q does not say to run pyrula db migrate", what, err)
		}
	}
	_, err := a.Meta(ctx, "ns", "run-1")
	check("Meta", err)
	_, err = a.Events(ctx, "ns", "run-1")
	check("Events", err)
	_, err = a.Results(ctx, "ns", "run-1")
	check("Results", err)
	_, err = a.Run(ctx, "ns", "run-1")
	check("Run", err)
	check("Put", a.Put(ctx, finishedRun(t, "ns", "run-1", 2)))
	check("Check", pgarchive.Check(ctx, p))
}

// finishedRun is a finished run with n events (run:submitted … run:complete)
// and one result.
func finishedRun(t *testing.T, ns, id string, n int) *journal.Run {
	t.Helper()
	at := time.Date(2025, 3, 4, 5, 6, 7, 891000, time.UTC)
	r := &journal.Run{Meta: journal.Meta{
		RunID: id, Namespace: ns, TargetName: "checkout", CodeVersion: "v1", Inputs: json.RawMessage(`{"a":1}`),
		Status: journal.StatusComplete, LastSeq: int64(n), LeaseOwner: "w", LeaseEpoch: 1, CreatedAt: at, FinishedAt: at.Add(time.Second),
	}}
	for i := 1; i <= n; i++ {
		kind := runevent.CallStart
		switch i {
		case 1:
			kind = runevent.RunSubmitted
		case n:
			kind = runevent.RunComplete
		}
		r.Events = append(r.Events, journal.Event{RunSeq: int64(i), Kind: kind, At: at, Extra: map[string]json.RawMessage{"i": json.RawMessage(`"é<&>"`)}})
	}
	r.Results = []bundle.Result{{Kind: "step", Key: "a:0", Fingerprint: "f", Result: json.RawMessage(`[1.0,"x"]`)}}
	return r
}

func TestPut(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	ns := testenv.UniqueName(t, "pa")
	a := archivetest.New(t, ns)
	r := finishedRun(t, ns, "run-1", 3)
	if err := a.Put(ctx, r); err != nil {
		t.Fatalf("Put: %v", err)
	}
	// Again: idempotent.
	if err := a.Put(ctx, r); err != nil {
		t.Fatalf("second Put of the same run: %v", err)
	}
	got, err := a.Run(ctx, ns, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	want := *r
	want.Meta.Origin = journal.OriginArchive
	if got.Meta.Origin != journal.OriginArchive || len(got.Events) != 3 || len(got.Results) != 1 {
		t.Fatalf("Run = %+v", got)
	}
	for i := range got.Events {
		g, _ := got.Events[i].JSON()
		w, _ := want.Events[i].JSON()
		if string(g) != string(w) {
			t.Errorf("event %d = %s, want %s", i+1, g, w)
		}
	}
	if string(got.Results[0].Result) != `[1.0,"x"]` {
		t.Errorf("result = %s", got.Results[0].Result)
	}
	// A different run under the same id is refused.
	other := finishedRun(t, ns, "run-1", 4)
	if err := a.Put(ctx, other); !errors.Is(err, journal.ErrRunExists) {
		t.Errorf("Put of a different run under an archived id: %v, want ErrRunExists", err)
	}
	// Runs that cannot be archived.
	running := finishedRun(t, ns, "run-2", 2)
	running.Meta.Status = journal.StatusRunning
	if err := a.Put(ctx, running); !errors.Is(err, journal.ErrRunNotFinished) {
		t.Errorf("Put of a running run: %v", err)
	}
	gap := finishedRun(t, ns, "run-3", 3)
	gap.Events = gap.Events[1:]
	if err := a.Put(ctx, gap); !errors.Is(err, journal.ErrInvalid) {
		t.Errorf("Put of a run with missing events: %v", err)
	}
	if _, err := a.Meta(ctx, ns, "run-3"); !errors.Is(err, journal.ErrRunNotFound) {
		t.Errorf("a refused Put archived something: %v", err)
	}
	// A run without results reads back with none.
	bare := finishedRun(t, ns, "run-4", 2)
	bare.Results = nil
	if err := a.Put(ctx, bare); err != nil {
		t.Fatal(err)
	}
	if rs, err := a.Results(ctx, ns, "run-4"); err != nil || len(rs) != 0 {
		t.Errorf("Results of a run without any = %v, %v", rs, err)
	}
	if _, err := a.Results(ctx, ns, "run-5"); !errors.Is(err, journal.ErrRunNotFound) {
		t.Errorf("Results of a missing run: %v", err)
	}
}

// TestConcurrentPut: two sealers archiving the same run at once both
// succeed, and the run is archived once.
func TestConcurrentPut(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	ns := testenv.UniqueName(t, "pa")
	a := archivetest.New(t, ns)
	r := finishedRun(t, ns, "run-1", 50)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := a.Put(ctx, r); err != nil {
				t.Errorf("concurrent Put: %v", err)
			}
		}()
	}
	wg.Wait()
	evs, err := a.Events(ctx, ns, "run-1")
	if err != nil || len(evs) != 50 {
		t.Errorf("Events = %d, %v", len(evs), err)
	}
}

// TestFinished lists the archived runs of a target (journal.ArchiveLister)
// by status and by when they finished, in run id order, and only the
// namespace's.
func TestFinished(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	ns := testenv.UniqueName(t, "pf")
	a := archivetest.New(t, ns)
	l, ok := a.(journal.ArchiveLister)
	if !ok {
		t.Fatalf("%T does not list its runs", a)
	}
	base := time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)
	put := func(ns, id, target string, status journal.Status, finished time.Time) {
		r := finishedRun(t, ns, id, 2)
		r.Meta.TargetName, r.Meta.Status, r.Meta.FinishedAt = target, status, finished
		if status == journal.StatusError {
			r.Events[1].Kind = runevent.RunError
		}
		if err := a.Put(ctx, r); err != nil {
			t.Fatalf("Put %s: %v", id, err)
		}
	}
	put(ns, "run-c", "checkout", journal.StatusComplete, base.Add(3*time.Second))
	put(ns, "run-a", "checkout", journal.StatusComplete, base.Add(time.Second))
	put(ns, "run-b", "checkout", journal.StatusError, base.Add(2*time.Second))
	put(ns, "run-d", "triage", journal.StatusComplete, base)
	ids := func(q journal.FinishedQuery) []string {
		refs, err := l.Finished(ctx, ns, q)
		if err != nil {
			t.Fatal(err)
		}
		out := []string{}
		for _, r := range refs {
			out = append(out, r.RunID)
		}
		return out
	}
	for _, c := range []struct {
		q    journal.FinishedQuery
		want []string
	}{
		{journal.FinishedQuery{Target: "checkout"}, []string{"run-a", "run-c"}},
		{journal.FinishedQuery{Target: "checkout", Status: journal.StatusError}, []string{"run-b"}},
		{journal.FinishedQuery{Target: "checkout", After: base.Add(2 * time.Second)}, []string{"run-c"}},
		{journal.FinishedQuery{Target: "checkout", Before: base.Add(3 * time.Second)}, []string{"run-a"}},
		{journal.FinishedQuery{Target: "nothing"}, []string{}},
	} {
		if got := ids(c.q); !slices.Equal(got, c.want) {
			t.Errorf("Finished(%+v) = %v, want %v", c.q, got, c.want)
		}
	}
}
