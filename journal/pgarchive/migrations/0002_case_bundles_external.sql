-- Nothing: the storage of archive.case_bundles' blobs is set by the fixture
-- store's own migrations (store/pgstore/migrations). This version stays so
-- that the archive's versions keep their numbers.
SELECT 1;
