-- optional: a storage setting; a store opens and works without it
-- Step inputs and outputs are compressed with lz4 where the server was built with it, and
-- stored uncompressed (out of line, in TOAST, when large) where it was not. pglz, PostgreSQL's
-- default, took half of the server's CPU per recorded step. A COPY of 10,000 chat steps of
-- ~3 KB (benchmarks/RESULTS.md), server time a row and table size a step:
--   PostgreSQL 16 (pgserver, no lz4): pglz 54 us, 2,730 B; uncompressed 27 us, 4,195 B
--   PostgreSQL 15 (Debian, a busier machine): pglz 70 us, 2,687 B; lz4 43 us, 2,671 B;
--                                     uncompressed 43 us, 4,191 B
-- Rows written before keep their compression; reading does not care.
-- ALTER TABLE waits for every open transaction on run_log: the runner gives it a short lock
-- timeout and, if it cannot get the lock (or the role may not alter the table), leaves it
-- pending for a later open instead of holding the open up.

-- EXECUTE: a server older than PostgreSQL 14 would not parse SET COMPRESSION at all.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_settings
               WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals)) THEN
        EXECUTE 'ALTER TABLE {schema}.run_log ALTER COLUMN input SET COMPRESSION lz4, '
                'ALTER COLUMN output SET COMPRESSION lz4';
    ELSE
        EXECUTE 'ALTER TABLE {schema}.run_log ALTER COLUMN input SET STORAGE EXTERNAL, '
                'ALTER COLUMN output SET STORAGE EXTERNAL';
    END IF;
END
$$;
