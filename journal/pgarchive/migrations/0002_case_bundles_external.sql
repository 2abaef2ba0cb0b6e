-- Bundles are stored zstd-compressed: keep them out of line without
-- PostgreSQL compressing them again (saves about a third of a large save).
ALTER TABLE archive.case_bundles ALTER COLUMN blob SET STORAGE EXTERNAL;
