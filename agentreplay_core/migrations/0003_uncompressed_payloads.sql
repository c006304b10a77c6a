-- optional: a storage setting; a store opens and works without it
-- Step inputs and outputs are stored uncompressed (out of line, in TOAST, when large).
-- Compressing them with pglz, PostgreSQL's default, took half of the server's CPU per recorded
-- step: COPY of 10,000 chat steps of ~3 KB, 54 us a row compressed, 27 us uncompressed. On
-- disk a step takes 1.24x its canonical JSON instead of 0.82x (benchmarks/RESULTS.md). Rows
-- written before keep their compression; reading does not care. To compress again (with lz4,
-- fast, where the server was built with it):
--   ALTER TABLE <schema>.run_log ALTER COLUMN input SET STORAGE EXTENDED,
--       ALTER COLUMN output SET STORAGE EXTENDED;
--   ALTER TABLE <schema>.run_log ALTER COLUMN input SET COMPRESSION lz4,
--       ALTER COLUMN output SET COMPRESSION lz4;
-- ALTER TABLE waits for every open transaction on run_log: the runner gives it a short lock
-- timeout and, if it cannot get the lock (or the role may not alter the table), leaves it
-- pending for a later open instead of holding the open up.

ALTER TABLE {schema}.run_log
    ALTER COLUMN input SET STORAGE EXTERNAL,
    ALTER COLUMN output SET STORAGE EXTERNAL;
