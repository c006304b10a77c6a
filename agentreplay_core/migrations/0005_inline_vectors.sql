-- optional: a storage setting; a store opens and works without it
-- requires-extension: vector
-- A pgvector copy of up to ~2,000 dimensions stays in its heap row instead of going to TOAST.
-- With the default 2 KB threshold a 768-dimension vector (3 KB) was first run through pglz,
-- which does not shrink float32 noise, then cut into two TOAST chunks with their index
-- entries; a row that fits a page is one heap tuple now, in about the same room on disk.
-- COPY of the pgvector rows of 768-dimension vectors, 6,400 a run in groups of a few
-- hundred, PostgreSQL 16, both settings alternating (benchmarks/RESULTS.md): defaults 52-81 us
-- a vector, these 28-57 us.
-- Larger vectors still go to TOAST, uncompressed: compression only costs time on floats.
ALTER TABLE {schema}.embeddings SET (toast_tuple_target = 8160),
    ALTER COLUMN embedding SET STORAGE EXTERNAL;
