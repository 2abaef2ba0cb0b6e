-- Bundles of the Postgres fixture store: the zstd blob named by the bundle's
-- hash. updated_at is refreshed when a save finds the bundle present, so
-- that gc's grace period protects it. IF NOT EXISTS: a database migrated
-- before the store had migrations of its own has the table already.
CREATE TABLE IF NOT EXISTS archive.case_bundles (
    hash       text        PRIMARY KEY CHECK (hash ~ '^[0-9a-f]{64}$'),
    blob       bytea       NOT NULL,
    size       bigint      NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS case_bundles_updated_at ON archive.case_bundles (updated_at);

-- Bundles are stored zstd-compressed: keep them out of line without
-- PostgreSQL compressing them again (saves about a third of a large save).
ALTER TABLE archive.case_bundles ALTER COLUMN blob SET STORAGE EXTERNAL;
