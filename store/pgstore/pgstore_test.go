package pgstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/store"
	"github.com/pyrula/caseworker/store/storetest"
)

// Every test that stores bundles gets a database of its own, copied from a
// migrated template database that the first such test creates; TestMain
// drops the template at the end.

func TestMain(m *testing.M) {
	code := m.Run()
	if err := dropTemplate(); err != nil {
		fmt.Fprintf(os.Stderr, "pgstore: drop template database: %v\n", err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

var epoch = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

func testCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// template is the migrated database that test databases are copied from.
var template struct {
	mu    sync.Mutex
	admin string // the DSN of PYRULA_TEST_POSTGRES_DSN
	name  string // "" until created
}

// withDatabase returns admin (a URL) naming database name instead.
func withDatabase(t testing.TB, admin, name string) string {
	t.Helper()
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("parse %s: %v", testenv.EnvPostgresDSN, err)
	}
	u.Path = "/" + name
	return u.String()
}

func uniqueDBName(t testing.TB, prefix string) string {
	return strings.ReplaceAll(testenv.UniqueName(t, prefix), "-", "_")
}

// adminExec runs sql on a connection of its own to the admin database.
func adminExec(ctx context.Context, dsn, sql string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql)
	return err
}

// templateDB returns the name of the migrated template database, creating
// it on the first call.
func templateDB(t testing.TB, admin string) string {
	t.Helper()
	template.mu.Lock()
	defer template.mu.Unlock()
	if template.name != "" {
		return template.name
	}
	ctx := testCtx(t)
	name := uniqueDBName(t, "pyrula_pgstore_tmpl")
	if err := adminExec(ctx, admin, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create the template database (the test role must be allowed to create databases): %v", err)
	}
	template.admin, template.name = admin, name
	pool, err := pgxpool.New(ctx, withDatabase(t, admin, name))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := Migrate(ctx, pool); err != nil {
		t.Fatalf("migrate the template database: %v", err)
	}
	return name
}

func dropTemplate() error {
	template.mu.Lock()
	defer template.mu.Unlock()
	if template.name == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return adminExec(ctx, template.admin, "DROP DATABASE IF EXISTS "+template.name+" WITH (FORCE)")
}

// freshDatabase creates an empty database, migrated when migrated is true,
// and returns its URL; it is dropped when t ends.
func freshDatabase(t testing.TB, migrated bool) string {
	t.Helper()
	admin := testenv.PostgresDSN(t)
	ctx := testCtx(t)
	name := uniqueDBName(t, "pyrula_pgstore")
	sql := "CREATE DATABASE " + name
	if migrated {
		sql += " TEMPLATE " + templateDB(t, admin)
	}
	if err := adminExec(ctx, admin, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := adminExec(ctx, admin, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop %s: %v", name, err)
		}
	})
	return withDatabase(t, admin, name)
}

// open opens a store on dsn, closed when t ends.
func open(t testing.TB, dsn string, opts Options) *Store {
	t.Helper()
	s, err := Open(testCtx(t), dsn, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// newStore opens a store on a database of its own.
func newStore(t testing.TB, now func() time.Time) *Store {
	t.Helper()
	return open(t, freshDatabase(t, true), Options{Now: now})
}

func TestConformance(t *testing.T) {
	clock := storetest.NewClock(epoch)
	storetest.Run(t, func(t *testing.T) store.Store { return newStore(t, clock.Now) },
		storetest.WithClock(clock), storetest.WithCorrupt(corrupt), storetest.WithLeaveTempFile(leaveTemp))
}

// TestConformanceDatabaseClock runs the suite as in production: the
// database's now() stamps updated_at.
func TestConformanceDatabaseClock(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return newStore(t, nil) },
		storetest.WithCorrupt(corrupt), storetest.WithLeaveTempFile(leaveTemp))
}

// corrupt flips a byte in the middle of a stored blob, in the table.
func corrupt(t *testing.T, st store.Store, hash bundle.Hash) {
	t.Helper()
	tag, err := st.(*Store).pool.Exec(testCtx(t), `UPDATE archive.case_bundles
SET blob = set_byte(blob, length(blob)/2, get_byte(blob, length(blob)/2) # 32) WHERE hash = $1`, string(hash))
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("corrupt %s: %v (%d rows)", hash.Short(), err, tag.RowsAffected())
	}
}

// leaveTemp does what a Put cut off by a crash does: it inserts partial in
// a transaction and loses its connection before committing.
func leaveTemp(t *testing.T, st store.Store, hash bundle.Hash, partial []byte) {
	t.Helper()
	ctx := testCtx(t)
	conn, err := pgx.ConnectConfig(ctx, st.(*Store).pool.Config().ConnConfig.Copy())
	if err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO archive.case_bundles (hash, blob, size) VALUES ($1, $2, $3) ON CONFLICT (hash) DO NOTHING`,
		string(hash), partial, len(partial)); err != nil {
		t.Fatal(err)
	}
	// The connection goes away with the transaction open: the server rolls
	// it back.
	if err := conn.PgConn().Conn().Close(); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close(ctx)
}

func blobOf(t testing.TB, c *bundle.Canonical) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := c.WriteBlob(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestLayout(t *testing.T) {
	t.Parallel()
	s := newStore(t, nil)
	ctx := testCtx(t)
	c := storetest.Bundle(t, 0)
	before := time.Now()
	if _, err := store.Save(ctx, s, c); err != nil {
		t.Fatal(err)
	}
	var blob []byte
	var size int64
	var created, updated time.Time
	err := s.pool.QueryRow(ctx, `SELECT blob, size, created_at, updated_at FROM archive.case_bundles WHERE hash = $1`,
		string(c.Hash())).Scan(&blob, &size, &created, &updated)
	if err != nil {
		t.Fatal(err)
	}
	if want := blobOf(t, c); !bytes.Equal(blob, want) || size != int64(len(want)) {
		t.Errorf("row holds %d bytes (size %d), want the %d-byte zstd blob", len(blob), size, len(want))
	}
	if !created.Equal(updated) || updated.Before(before.Add(-time.Minute)) || updated.After(time.Now().Add(time.Minute)) {
		t.Errorf("created_at %v, updated_at %v: want both the database's now() at the save", created, updated)
	}
	if _, err := store.Save(ctx, s, c); err != nil {
		t.Fatal(err)
	}
	var created2, updated2 time.Time
	if err := s.pool.QueryRow(ctx, `SELECT created_at, updated_at FROM archive.case_bundles WHERE hash = $1`,
		string(c.Hash())).Scan(&created2, &updated2); err != nil {
		t.Fatal(err)
	}
	if !created2.Equal(created) || !updated2.After(updated) {
		t.Errorf("re-save: created_at %v → %v, updated_at %v → %v; want created kept, updated moved on",
			created, created2, updated, updated2)
	}
}

// TestNotMigrated: a database where `pyrula db migrate` never ran is
// refused at Open, with a message that says what to run.
func TestNotMigrated(t *testing.T) {
	t.Parallel()
	dsn := freshDatabase(t, false)
	s, err := Open(testCtx(t), dsn, Options{})
	if err == nil {
		s.Close()
		t.Fatal("Open of an unmigrated database succeeded")
	}
	if !errors.Is(err, ErrNotMigrated) || !strings.Contains(err.Error(), "pyrula db migrate") {
		t.Errorf("Open of an unmigrated database: %q, want ErrNotMigrated saying to run `pyrula db migrate`", err)
	}
}

// TestTableDroppedAfterOpen: every method then says the database is not
// migrated.
func TestTableDroppedAfterOpen(t *testing.T) {
	t.Parallel()
	s := newStore(t, nil)
	ctx := testCtx(t)
	c := storetest.Bundle(t, 0)
	if _, err := s.pool.Exec(ctx, `DROP TABLE archive.case_bundles`); err != nil {
		t.Fatal(err)
	}
	_, err := store.Save(ctx, s, c)
	if !errors.Is(err, ErrNotMigrated) {
		t.Errorf("Save: %v, want ErrNotMigrated", err)
	}
	_, err = s.Stat(ctx, c.Hash())
	if !errors.Is(err, ErrNotMigrated) || errors.Is(err, store.ErrNotFound) {
		t.Errorf("Stat: %v, want ErrNotMigrated (not ErrNotFound)", err)
	}
	for _, err := range s.List(ctx) {
		if !errors.Is(err, ErrNotMigrated) {
			t.Errorf("List: %v, want ErrNotMigrated", err)
		}
	}
}

func TestOpenURLs(t *testing.T) {
	t.Parallel()
	dsn := freshDatabase(t, true)
	u, _ := url.Parse(dsn)
	db := strings.TrimPrefix(u.Path, "/")
	port := u.Port()
	if port == "" {
		port = "5432"
	}
	wantID := "postgres://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port) + "/" + db

	// postgresql:// with a password and parameters: the identity keeps none
	// of them. (The test server may not check passwords.)
	const secret = "s3cr3t-Pa55"
	withSecret := *u
	withSecret.Scheme = "postgresql"
	withSecret.User = url.UserPassword(u.User.Username(), secret)
	s, err := Open(testCtx(t), withSecret.String(), Options{})
	if err != nil {
		if strings.Contains(err.Error(), secret) {
			t.Fatalf("Open error shows the password: %v", err)
		}
		t.Logf("Open with a password: %v (the server checks passwords)", err)
	} else {
		if s.Identity() != wantID {
			t.Errorf("Identity = %q, want %q", s.Identity(), wantID)
		}
		s.Close()
	}

	// No server: a timely error without the password.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	start := time.Now()
	_, err = Open(testCtx(t), "postgres://user:"+secret+"@"+dead+"/db?sslmode=disable", Options{})
	if err == nil || strings.Contains(err.Error(), secret) {
		t.Errorf("Open with no server: %v, want an error without the password", err)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("Open with no server took %v", d)
	}
	// A DSN pgx cannot parse.
	_, err = Open(testCtx(t), "postgres://user:"+secret+"@127.0.0.1/db?sslmode=bogus", Options{})
	if err == nil || strings.Contains(err.Error(), secret) {
		t.Errorf("Open of a bad DSN: %v, want an error without the password", err)
	}
	for _, bad := range []string{"memory:", "file:///tmp/x", "s3://bucket/p", "host=localhost dbname=x", "postgres://"} {
		if s, err := Open(testCtx(t), bad, Options{}); !errors.Is(err, store.ErrInvalidURL) {
			if err == nil {
				s.Close()
			}
			t.Errorf("Open(%q): %v, want ErrInvalidURL", bad, err)
		}
	}
}

func TestTooLarge(t *testing.T) {
	t.Parallel()
	s := open(t, freshDatabase(t, true), Options{MaxBlobSize: 1000})
	ctx := testCtx(t)
	c := storetest.Bundle(t, 1)
	if _, err := s.Put(ctx, c.Hash(), bytes.NewReader(make([]byte, 1001))); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Put of 1001 bytes with a 1000-byte bound: %v, want ErrTooLarge", err)
	}
	if created, err := s.Put(ctx, c.Hash(), bytes.NewReader(make([]byte, 1000))); err != nil || !created {
		t.Errorf("Put of 1000 bytes: %v %v", created, err)
	}
}

// TestDeleteBeforeRacingPut runs DeleteBefore and a later Put of the same
// bundle at once, many times: whatever the interleaving, the bundle is
// stored afterwards with a time not before the cutoff.
func TestDeleteBeforeRacingPut(t *testing.T) {
	t.Parallel()
	clock := storetest.NewClock(epoch)
	s := newStore(t, clock.Now)
	ctx := testCtx(t)
	c := storetest.Bundle(t, 3)
	blob := blobOf(t, c)
	for i := range 200 {
		if _, err := s.Put(ctx, c.Hash(), bytes.NewReader(blob)); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Hour)
		cutoff := clock.Now()
		clock.Advance(time.Hour)
		var wg sync.WaitGroup
		wg.Go(func() {
			if _, err := s.DeleteBefore(ctx, c.Hash(), cutoff); err != nil {
				t.Error(err)
			}
		})
		wg.Go(func() {
			if _, err := s.Put(ctx, c.Hash(), bytes.NewReader(blob)); err != nil {
				t.Error(err)
			}
		})
		wg.Wait()
		info, err := s.Stat(ctx, c.Hash())
		if err != nil {
			t.Fatalf("iteration %d: a Put after the cutoff was undone: %v", i, err)
		}
		if info.UpdatedAt.Before(cutoff) {
			t.Fatalf("iteration %d: UpdatedAt %v before cutoff %v", i, info.UpdatedAt, cutoff)
		}
	}
}

// TestListPages lists more bundles than one page holds.
func TestListPages(t *testing.T) {
	t.Parallel()
	s := newStore(t, nil)
	ctx := testCtx(t)
	const n = listPage*2 + 17
	if _, err := s.pool.Exec(ctx, `INSERT INTO archive.case_bundles (hash, blob, size)
SELECT encode(sha256(i::text::bytea), 'hex'), '\x00'::bytea, 1 FROM generate_series(1, $1) AS i`, n); err != nil {
		t.Fatal(err)
	}
	seen := map[bundle.Hash]bool{}
	for info, err := range s.List(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		if seen[info.Hash] || info.Size != 1 || info.UpdatedAt.IsZero() {
			t.Fatalf("List yielded %+v (seen before: %v)", info, seen[info.Hash])
		}
		seen[info.Hash] = true
	}
	if len(seen) != n {
		t.Errorf("List yielded %d bundles, want %d", len(seen), n)
	}
}

// TestServerEndsConnections: the server ends every connection of the store
// (a restart, pg_terminate_backend): the next operations succeed on new
// connections.
func TestServerEndsConnections(t *testing.T) {
	t.Parallel()
	dsn := freshDatabase(t, true)
	s := open(t, dsn, Options{})
	ctx := testCtx(t)
	cs := []*bundle.Canonical{storetest.Bundle(t, 0), storetest.Bundle(t, 1)}
	if _, err := store.Save(ctx, s, cs[0]); err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(dsn)
	db := strings.TrimPrefix(u.Path, "/")
	terminate := func() {
		t.Helper()
		var n int
		err := pgx.BeginFunc(ctx, mustConn(t, testenv.PostgresDSN(t)), func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = $1`, db).Scan(&n)
		})
		if err != nil || n == 0 {
			t.Fatalf("terminate the store's connections: %d, %v", n, err)
		}
	}
	for i, op := range []func() error{
		func() error { _, err := s.Stat(ctx, cs[0].Hash()); return err },
		func() error { _, err := store.Save(ctx, s, cs[1]); return err },
		func() error {
			rc, err := store.Get(ctx, s, cs[1].Hash())
			if err != nil {
				return err
			}
			defer rc.Close()
			_, err = io.Copy(io.Discard, rc)
			return err
		},
		func() error {
			for _, err := range s.List(ctx) {
				if err != nil {
					return err
				}
			}
			return nil
		},
		func() error { _, err := s.Delete(ctx, cs[0].Hash()); return err },
	} {
		terminate()
		if err := op(); err != nil {
			t.Errorf("operation %d after the server ended the connections: %v", i, err)
		}
	}
}

func mustConn(t testing.TB, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(testCtx(t), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// TestServerStopsAnswering: with the server unreachable mid-operation (a
// proxy that stops forwarding), operations end with their context's
// deadline, no reader sees a partial bundle, and once the server is back
// the next operations succeed.
func TestServerStopsAnswering(t *testing.T) {
	t.Parallel()
	dsn := freshDatabase(t, true)
	p := startProxy(t, dsn)
	s := open(t, p.dsn, Options{})
	direct := open(t, dsn, Options{})
	ctx := testCtx(t)
	a, b := storetest.Bundle(t, 0), storetest.Bundle(t, 2)
	if _, err := store.Save(ctx, s, a); err != nil {
		t.Fatal(err)
	}

	p.pause()
	const deadline = 500 * time.Millisecond
	for name, op := range map[string]func(context.Context) error{
		"Stat": func(ctx context.Context) error { _, err := s.Stat(ctx, a.Hash()); return err },
		"Save": func(ctx context.Context) error { _, err := store.Save(ctx, s, b); return err },
		"Open": func(ctx context.Context) error { _, err := s.Open(ctx, a.Hash()); return err },
	} {
		octx, cancel := context.WithTimeout(ctx, deadline)
		start := time.Now()
		err := op(octx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s with the server gone: %v, want an error wrapping context.DeadlineExceeded", name, err)
		}
		if d := time.Since(start); d > deadline+5*time.Second {
			t.Errorf("%s with the server gone took %v (deadline %v)", name, d, deadline)
		}
	}
	// Readers on another connection see b whole or not at all.
	if rc, err := store.Get(ctx, direct, b.Hash()); err == nil {
		if _, err := io.Copy(io.Discard, rc); err != nil {
			t.Errorf("reading %s saved while the server was gone: %v", b.Hash().Short(), err)
		}
		rc.Close()
	} else if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get %s: %v", b.Hash().Short(), err)
	}

	p.resume()
	if _, err := store.Save(ctx, s, b); err != nil {
		t.Errorf("Save once the server is back: %v", err)
	}
	for _, c := range []*bundle.Canonical{a, b} {
		rc, err := store.Get(ctx, s, c.Hash())
		if err != nil {
			t.Fatalf("Get once the server is back: %v", err)
		}
		if _, err := io.Copy(io.Discard, rc); err != nil {
			t.Errorf("read %s: %v", c.Hash().Short(), err)
		}
		rc.Close()
	}
}

// proxy forwards TCP connections to a PostgreSQL server; while paused it
// reads but forwards nothing, as a server that stopped answering.
type proxy struct {
	dsn  string
	ln   net.Listener
	gate sync.RWMutex // held for writing while paused
	wg   sync.WaitGroup

	mu    sync.Mutex
	conns []net.Conn
}

func startProxy(t *testing.T, dsn string) *proxy {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	target := u.Host
	if u.Port() == "" {
		target = net.JoinHostPort(u.Hostname(), "5432")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln}
	u.Host = ln.Addr().String()
	p.dsn = u.String()
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			p.wg.Go(func() { p.copy(up, c) })
			p.wg.Go(func() { p.copy(c, up) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *proxy) copy(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.gate.RLock()
			_, werr := dst.Write(buf[:n])
			p.gate.RUnlock()
			if werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *proxy) pause()  { p.gate.Lock() }
func (p *proxy) resume() { p.gate.Unlock() }

// bigBundle returns a bundle whose blob is about size bytes: its inputs are
// hex text of random bytes, which zstd shrinks to about half.
func bigBundle(b testing.TB, size int) *bundle.Canonical {
	b.Helper()
	raw := make([]byte, size)
	if _, err := rand.Read(raw); err != nil {
		b.Fatal(err)
	}
	v := storetest.NewBundle(2)
	v.Manifest.Inputs = []byte(`{"pad":"` + hex.EncodeToString(raw) + `"}`)
	c, err := bundle.Encode(v)
	if err != nil {
		b.Fatal(err)
	}
	return c
}

func BenchmarkPut(b *testing.B) {
	for _, size := range benchSizes() {
		b.Run(fmt.Sprintf("%dMiB", size>>20), func(b *testing.B) {
			s := newStore(b, nil)
			ctx := testCtx(b)
			c := bigBundle(b, size)
			blob := blobOf(b, c)
			b.SetBytes(int64(len(blob)))
			for b.Loop() {
				created, err := s.Put(ctx, c.Hash(), bytes.NewReader(blob))
				if err != nil || !created {
					b.Fatalf("Put: %v %v", created, err)
				}
				b.StopTimer()
				if _, err := s.Delete(ctx, c.Hash()); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}

// BenchmarkGet measures store.Get read to the end: the query, and the
// verification (decompression and hashing) on top.
func BenchmarkGet(b *testing.B) {
	for _, size := range benchSizes() {
		b.Run(fmt.Sprintf("%dMiB", size>>20), func(b *testing.B) {
			s := newStore(b, nil)
			ctx := testCtx(b)
			c := bigBundle(b, size)
			blob := blobOf(b, c)
			if _, err := s.Put(ctx, c.Hash(), bytes.NewReader(blob)); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(blob)))
			for b.Loop() {
				rc, err := store.Get(ctx, s, c.Hash())
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.Copy(io.Discard, rc); err != nil {
					b.Fatal(err)
				}
				rc.Close()
			}
		})
	}
}

// BenchmarkOpen measures the backend alone: the blob out of the table.
func BenchmarkOpen(b *testing.B) {
	for _, size := range benchSizes() {
		b.Run(fmt.Sprintf("%dMiB", size>>20), func(b *testing.B) {
			s := newStore(b, nil)
			ctx := testCtx(b)
			c := bigBundle(b, size)
			blob := blobOf(b, c)
			if _, err := s.Put(ctx, c.Hash(), bytes.NewReader(blob)); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(blob)))
			for b.Loop() {
				rc, err := s.Open(ctx, c.Hash())
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.Copy(io.Discard, rc); err != nil {
					b.Fatal(err)
				}
				rc.Close()
			}
		})
	}
}

// benchSizes are the blob sizes of the benchmarks: 1 MiB only with -short
// (the smoke run of scripts/test).
func benchSizes() []int {
	if testing.Short() {
		return []int{1 << 20}
	}
	return []int{1 << 20, 64 << 20}
}
