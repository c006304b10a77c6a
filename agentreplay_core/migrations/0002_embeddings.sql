-- requires-extension: vector
-- Recorded embedding vectors as pgvector values, for similarity search (DESIGN section 2).
-- The exact float64 values live in the step's output; these float32 copies only serve search.
-- The migration runner creates the extension first; {vector} is its qualified type. Without
-- pgvector this migration waits, and a later open applies it once the extension is available.
-- The column has no fixed dimension (models differ), so queries filter on dims.

CREATE TABLE IF NOT EXISTS {schema}.embeddings (
    run_id uuid NOT NULL,
    step integer NOT NULL,
    position integer NOT NULL,
    dims integer NOT NULL CHECK (dims >= 1),
    embedding {vector} NOT NULL,
    PRIMARY KEY (run_id, step, position)
);

CREATE INDEX IF NOT EXISTS embeddings_dims_idx ON {schema}.embeddings (dims);
