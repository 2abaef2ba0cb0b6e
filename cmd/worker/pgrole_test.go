package main_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/internal/testwait"
)

// roleStatements are the SQL lines of docs/operate.md that make the
// worker's PostgreSQL role, for role.
func roleStatements(t *testing.T, role string) []string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/operate.md")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range regexp.MustCompile(`(?m)^(CREATE ROLE|GRANT) [^\n]*pyrula_worker[^\n]*;$`).FindAll(doc, -1) {
		s := strings.ReplaceAll(string(l), "pyrula_worker", role)
		out = append(out, strings.Replace(s, "PASSWORD 'PASSWORD'", "PASSWORD 'not-used-here'", 1))
	}
	if len(out) < 3 {
		t.Fatalf("docs/operate.md has %d role lines (CREATE ROLE … pyrula_worker; GRANT … pyrula_worker;), want the role and its grants", len(out))
	}
	return out
}

// TestLeastPrivilegePostgres migrates a fresh database as its owner, makes
// the worker's role from the lines of docs/operate.md, and runs a worker as
// that role with PostgreSQL as its archive and its fixture store: every
// message type and a suite selected from the archive work, and the role can
// create, alter or drop nothing.
func TestLeastPrivilegePostgres(t *testing.T) {
	vurl := testenv.ValkeyURL(t)
	admin := testenv.FreshPostgresDatabase(t)
	if r := run(t, 2*time.Minute, []string{"PYRULA_POSTGRES_DSN=" + admin}, "db", "migrate"); r.code != 0 {
		t.Fatalf("migrate\n%s", r)
	}
	role := "pyrula_worker_" + randomHex(t)
	conn, err := pgx.Connect(t.Context(), admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, stmt := range roleStatements(t, role) {
		if _, err := conn.Exec(t.Context(), stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, admin)
		if err != nil {
			return
		}
		defer c.Close(ctx)
		c.Exec(ctx, "DROP OWNED BY "+role)
		c.Exec(ctx, "DROP ROLE IF EXISTS "+role)
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role) // the test server trusts loopback
	dsn := u.String()

	ns := testenv.UniqueName(t, "wpgrole")
	client := testenv.ValkeyClientAt(t, vurl, ns)
	startReady(t, workerEnv(vurl, ns, "a", "PYRULA_POSTGRES_DSN="+dsn, "PYRULA_COMPLETED_TTL=1s")...)
	runID, hash, last := seedCase(t, client, ns)
	sendAll(t, client, ns+":case-messages", []any{envelope{MessageID: "case", Type: "run_case", Body: map[string]any{"target_name": "checkout",
		"source": map[string]any{"bundle": map[string]any{"fixture_hash": hash}}, "options": map[string]any{"replay_only": true}}}})
	got, _ := readReplies(t, client, ns+":case-replies", last, 1, 30*time.Second)
	caseRun := runResultID(got[0])
	if caseRun == "" {
		t.Fatalf("run_case: %+v", got[0])
	}
	waitRunsFinished(t, client, ns, []string{caseRun}, 30*time.Second)
	// The runs move to the archive once their keys expire; the suite then
	// selects them from there.
	testwait.Eventually(t, 30*time.Second, "the seeded run archived and gone from Valkey", func() bool {
		var n int
		conn.QueryRow(t.Context(), "SELECT count(*) FROM archive.runs WHERE run_id = $1", runID).Scan(&n)
		exists, _ := client.Do(t.Context(), client.B().Exists().Key(ns+":{"+runID+"}:meta").Build()).AsInt64()
		return n == 1 && exists == 0
	})
	suiteID := runSuite(t, client, ns, "suite")
	waitRunsFinished(t, client, ns, []string{suiteID}, 60*time.Second)
	if o := suiteOutcome(t, client, ns, suiteID); o.Total == 0 {
		t.Fatalf("suite outcome %+v: it selected no run from the archive", o)
	}
	sendAll(t, client, ns+":case-messages", []any{deleteBundle("delete", hash)})
	testwait.Eventually(t, 30*time.Second, "the delete_case_bundle reply", func() bool {
		for _, raw := range allReplies(t, client, ns+":case-replies")["delete"] {
			var r reply
			if json.Unmarshal([]byte(raw), &r) == nil && r.Status == "ok" {
				return true
			}
		}
		return false
	})

	// The role changes no schema.
	rc, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close(context.Background())
	for _, ddl := range []string{
		"CREATE TABLE archive.intruder (x int)",
		"ALTER TABLE archive.runs ADD COLUMN intruder int",
		"DROP TABLE archive.run_results",
		"TRUNCATE archive.runs",
		"CREATE SCHEMA intruder",
		"DELETE FROM archive.schema_migrations",
	} {
		_, err := rc.Exec(t.Context(), ddl)
		if pe := (*pgconn.PgError)(nil); !errors.As(err, &pe) || pe.Code != "42501" {
			t.Errorf("%s as the worker's role: %v, want insufficient_privilege (42501)", ddl, err)
		}
	}
}
