// Package pgarchive is the PostgreSQL archive of finished runs (docs/runtime.md): the journal.Archive that a live journal writes a run to when it
// finishes, before the run's Valkey keys may expire, and that reads fall back
// to afterwards. It also owns the schema "archive": its migrations are
// embedded SQL files (migrations/NNNN_name.sql) applied by Migrate, which
// `pyrula db migrate` runs. The same migrations create the table of the
// Postgres fixture store (archive.case_bundles).
//
// Events and result records are kept as text, exactly the bytes the journal
// wrote, so a run reads back from the archive byte for byte as it was.
//
// A database without the schema makes every call fail with ErrNotMigrated,
// whose message tells the user to run `pyrula db migrate`.
//
// pgarchive imports journal, bundle and internal/pgmigrate (its migrations),
// nothing else of the project.
package pgarchive

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/journal/internal/backend"
	"github.com/pyrula/caseworker/journal/internal/wire"
)

var _ journal.Archive = (*Archive)(nil)

// Archive is the archive in one PostgreSQL database. It is safe for
// concurrent use; it does not own the pool.
type Archive struct {
	pool *pgxpool.Pool
}

// New returns the archive in pool's database. It does no I/O; run Migrate
// (`pyrula db migrate`) once per database before using it.
func New(pool *pgxpool.Pool) *Archive { return &Archive{pool: pool} }

// translate turns a driver error into the journal's: no rows is
// ErrRunNotFound, a missing schema, table or column is ErrNotMigrated.
func translate(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return journal.ErrRunNotFound
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "3F000", "42P01", "42703": // invalid_schema_name, undefined_table, undefined_column
			return fmt.Errorf("%w (%s)", ErrNotMigrated, pgErr.Message)
		}
	}
	return err
}

// wrap adds the operation and the run to a translated error.
func wrap(op, namespace, runID string, err error) error {
	return fmt.Errorf("pgarchive: %s %s/%s: %w", op, namespace, runID, translate(err))
}

// Put implements journal.Archive.
func (a *Archive) Put(ctx context.Context, r *journal.Run) error {
	m := r.Meta
	if err := check(r); err != nil {
		return wrap("put", m.Namespace, m.RunID, err)
	}
	events := make([][]any, len(r.Events))
	for i, e := range r.Events {
		raw, err := e.JSON()
		if err != nil {
			return wrap("put", m.Namespace, m.RunID, err)
		}
		events[i] = []any{m.Namespace, m.RunID, e.RunSeq, string(e.Kind), string(raw)}
	}
	results := make([][]any, len(r.Results))
	for i, res := range r.Results {
		rec, err := wire.AppendResult(nil, res)
		if err != nil {
			return wrap("put", m.Namespace, m.RunID, err)
		}
		results[i] = []any{m.Namespace, m.RunID, res.Kind, res.Key, string(rec)}
	}
	err := pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO archive.runs
    (namespace, run_id, target_name, code_version, inputs, status, last_seq, lease_owner, lease_epoch, created_at, finished_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
ON CONFLICT (namespace, run_id) DO NOTHING`,
			m.Namespace, m.RunID, m.TargetName, m.CodeVersion, string(m.Inputs), string(m.Status), m.LastSeq,
			m.LeaseOwner, m.LeaseEpoch, m.CreatedAt, m.FinishedAt)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			// Archived before (a Seal that is repeated, or racing another).
			var lastSeq int64
			var status string
			if err := tx.QueryRow(ctx, `SELECT last_seq, status FROM archive.runs WHERE namespace = $1 AND run_id = $2`,
				m.Namespace, m.RunID).Scan(&lastSeq, &status); err != nil {
				return err
			}
			if lastSeq != m.LastSeq || status != string(m.Status) {
				return fmt.Errorf("%w: the archive holds a %s run with last_seq %d", journal.ErrRunExists, status, lastSeq)
			}
			return nil
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{Schema, "run_events"},
			[]string{"namespace", "run_id", "run_seq", "kind", "event"}, pgx.CopyFromRows(events)); err != nil {
			return err
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{Schema, "run_results"},
			[]string{"namespace", "run_id", "kind", "key", "record"}, pgx.CopyFromRows(results)); err != nil {
			return err
		}
		return nil
	})
	if err != nil {
		return wrap("put", m.Namespace, m.RunID, err)
	}
	return nil
}

// check refuses a run that cannot be archived.
func check(r *journal.Run) error {
	m := r.Meta
	if err := journal.CheckNamespace(m.Namespace); err != nil {
		return err
	}
	if err := journal.CheckRunID(m.RunID); err != nil {
		return err
	}
	if !m.Status.Terminal() {
		return fmt.Errorf("%w (%s)", journal.ErrRunNotFinished, m.Status)
	}
	if int64(len(r.Events)) != m.LastSeq {
		return fmt.Errorf("%w: %d events for last_seq %d", journal.ErrInvalid, len(r.Events), m.LastSeq)
	}
	for i, e := range r.Events {
		if e.RunSeq != int64(i+1) {
			return fmt.Errorf("%w: event %d has run_seq %d", journal.ErrInvalid, i+1, e.RunSeq)
		}
	}
	return nil
}

const metaQuery = `SELECT target_name, code_version, inputs, status, last_seq, lease_owner, lease_epoch, created_at, finished_at
FROM archive.runs WHERE namespace = $1 AND run_id = $2`

// scanMeta reads a row of metaQuery.
func scanMeta(row pgx.Row, namespace, runID string) (journal.Meta, error) {
	m := journal.Meta{RunID: runID, Namespace: namespace, Origin: journal.OriginArchive}
	var inputs, status string
	var created, finished time.Time
	if err := row.Scan(&m.TargetName, &m.CodeVersion, &inputs, &status, &m.LastSeq, &m.LeaseOwner, &m.LeaseEpoch, &created, &finished); err != nil {
		return journal.Meta{}, err
	}
	m.Inputs, m.Status = []byte(inputs), journal.Status(status)
	m.CreatedAt, m.FinishedAt = created.UTC(), finished.UTC()
	return m, nil
}

// Meta implements journal.Archive.
func (a *Archive) Meta(ctx context.Context, namespace, runID string) (journal.Meta, error) {
	m, err := scanMeta(a.pool.QueryRow(ctx, metaQuery, namespace, runID), namespace, runID)
	if err != nil {
		return journal.Meta{}, wrap("meta", namespace, runID, err)
	}
	return m, nil
}

const (
	eventsQuery  = `SELECT event FROM archive.run_events WHERE namespace = $1 AND run_id = $2 ORDER BY run_seq`
	resultsQuery = `SELECT record FROM archive.run_results WHERE namespace = $1 AND run_id = $2`
)

// Events implements journal.Archive.
func (a *Archive) Events(ctx context.Context, namespace, runID string) ([]journal.Event, error) {
	evs, err := scanEvents(a.pool.Query(ctx, eventsQuery, namespace, runID))
	if err == nil && len(evs) == 0 {
		err = journal.ErrRunNotFound // every run has its run:submitted event
	}
	if err != nil {
		return nil, wrap("events", namespace, runID, err)
	}
	return evs, nil
}

// Results implements journal.Archive.
func (a *Archive) Results(ctx context.Context, namespace, runID string) ([]bundle.Result, error) {
	rs, err := scanResults(a.pool.Query(ctx, resultsQuery, namespace, runID))
	if err == nil && len(rs) == 0 {
		_, err = a.Meta(ctx, namespace, runID) // none, or no such run?
	}
	if err != nil {
		return nil, wrap("results", namespace, runID, err)
	}
	return rs, nil
}

// Run implements journal.Archive. It reads the three parts in one round
// trip.
func (a *Archive) Run(ctx context.Context, namespace, runID string) (*journal.Run, error) {
	b := &pgx.Batch{}
	var r journal.Run
	var err error
	b.Queue(metaQuery, namespace, runID).QueryRow(func(row pgx.Row) error {
		r.Meta, err = scanMeta(row, namespace, runID)
		return err
	})
	b.Queue(eventsQuery, namespace, runID).Query(func(rows pgx.Rows) error {
		r.Events, err = scanEvents(rows, nil)
		return err
	})
	b.Queue(resultsQuery, namespace, runID).Query(func(rows pgx.Rows) error {
		r.Results, err = scanResults(rows, nil)
		return err
	})
	if err := a.pool.SendBatch(ctx, b).Close(); err != nil {
		return nil, wrap("run", namespace, runID, err)
	}
	return &r, nil
}

// scanEvents decodes rows of eventsQuery.
func scanEvents(rows pgx.Rows, err error) ([]journal.Event, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var evs []journal.Event
	for rows.Next() {
		var raw []byte
		if err := rows.Scan(&raw); err != nil {
			return nil, err
		}
		e, err := backend.DecodeEvent(raw)
		if err != nil {
			return nil, err
		}
		evs = append(evs, e)
	}
	return evs, rows.Err()
}

// scanResults decodes rows of resultsQuery, sorted by (kind, key).
func scanResults(rows pgx.Rows, err error) ([]bundle.Result, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	rs := []bundle.Result{}
	for rows.Next() {
		var raw []byte
		if err := rows.Scan(&raw); err != nil {
			return nil, err
		}
		r, err := backend.DecodeResult(raw)
		if err != nil {
			return nil, err
		}
		rs = append(rs, r)
	}
	backend.SortResults(rs)
	return rs, rows.Err()
}
