-- 0003: the archived runs of a target by when they finished, for a suite's
-- selection of finished runs (journal.ArchiveLister).
CREATE INDEX runs_by_target ON archive.runs (namespace, target_name, status, finished_at);
