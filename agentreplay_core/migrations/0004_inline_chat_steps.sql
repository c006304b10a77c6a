-- optional: a storage setting; a store opens and works without it
-- Where step payloads are stored uncompressed (migration 0003, on a server built without
-- lz4), a row of up to ~4 KB stays in its heap page instead of having its input moved to
-- TOAST: a chat step is then one heap tuple instead of a heap tuple, two TOAST chunks and their
-- index entries, and takes the same room on disk (two such rows fill a page). COPY of new
-- ~3.4 KB chat steps in transactions of 100 rows (benchmarks/RESULTS.md), PostgreSQL 16:
--   default TOAST target 33.8 us a row, 4,204 B a step; 4080: 26.4 us, 4,168 B.
-- Larger values still go to TOAST. A server with lz4 keeps the default: there rows above
-- ~2 KB are compressed, which keeps them small at no cost in time (0003).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_settings
                   WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals)) THEN
        EXECUTE 'ALTER TABLE {schema}.run_log SET (toast_tuple_target = 4080)';
    END IF;
END
$$;
