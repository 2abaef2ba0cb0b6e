-- 0001: the archive of finished runs.
--
-- JSON is kept as text, exactly the canonical bytes the journal wrote (never
-- jsonb, which reorders keys and respells numbers), so that a run read from
-- the archive is byte-for-byte the run read from Valkey, and hashes built
-- from it never change. Query it with event::jsonb when needed.

CREATE TABLE archive.runs (
    namespace    text        NOT NULL,
    run_id       text        NOT NULL,
    target_name  text        NOT NULL,
    code_version text        NOT NULL,
    inputs       text        NOT NULL,
    status       text        NOT NULL CHECK (status IN ('complete', 'error', 'cancelled')),
    last_seq     bigint      NOT NULL CHECK (last_seq >= 1),
    lease_owner  text        NOT NULL,
    lease_epoch  bigint      NOT NULL,
    created_at   timestamptz NOT NULL,
    finished_at  timestamptz NOT NULL,
    archived_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, run_id)
);

CREATE INDEX runs_finished_at ON archive.runs (finished_at);

CREATE TABLE archive.run_events (
    namespace text   NOT NULL,
    run_id    text   NOT NULL,
    run_seq   bigint NOT NULL CHECK (run_seq >= 1),
    kind      text   NOT NULL,
    event     text   NOT NULL,
    PRIMARY KEY (namespace, run_id, run_seq),
    FOREIGN KEY (namespace, run_id) REFERENCES archive.runs (namespace, run_id) ON DELETE CASCADE
);

CREATE TABLE archive.run_results (
    namespace text NOT NULL,
    run_id    text NOT NULL,
    kind      text NOT NULL,
    key       text NOT NULL,
    record    text NOT NULL,
    PRIMARY KEY (namespace, run_id, kind, key),
    FOREIGN KEY (namespace, run_id) REFERENCES archive.runs (namespace, run_id) ON DELETE CASCADE
);

-- The Postgres fixture store's table (archive.case_bundles) is not here: the
-- store has migrations of its own (store/pgstore/migrations), which create it
-- on a database where this migration did not.
