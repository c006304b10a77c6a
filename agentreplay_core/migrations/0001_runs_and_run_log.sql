-- Runs and their step log (DESIGN section 2).
-- Formatted with psycopg.sql: {schema} is the store's schema; write literal braces doubled.
-- No foreign key from run_log to runs: the hash chain guards integrity, and COPY throughput
-- matters more than a per-row lookup.

CREATE TABLE IF NOT EXISTS {schema}.runs (
    run_id uuid PRIMARY KEY,
    name text,
    status text NOT NULL
        CHECK (status IN ('recording', 'complete', 'failed', 'incomplete')),
    started_at timestamptz NOT NULL,
    finished_at timestamptz,
    parent_run_id uuid,
    fork_step integer,
    metadata jsonb NOT NULL,
    step_count integer NOT NULL DEFAULT 0,
    head_checksum text,
    format_version integer NOT NULL,
    chain text NOT NULL DEFAULT 'sha256'
);

-- Listing is newest first, optionally by name or status; run_id breaks ties.
CREATE INDEX IF NOT EXISTS runs_started_at_idx
    ON {schema}.runs (started_at DESC, run_id DESC);
CREATE INDEX IF NOT EXISTS runs_name_started_at_idx
    ON {schema}.runs (name, started_at DESC, run_id DESC);
CREATE INDEX IF NOT EXISTS runs_status_started_at_idx
    ON {schema}.runs (status, started_at DESC, run_id DESC);
CREATE INDEX IF NOT EXISTS runs_parent_run_id_idx
    ON {schema}.runs (parent_run_id) WHERE parent_run_id IS NOT NULL;

-- The primary key serves every per-run query, so there is no index on run_id alone.
CREATE TABLE IF NOT EXISTS {schema}.run_log (
    run_id uuid NOT NULL,
    step integer NOT NULL CHECK (step >= 1),
    kind text NOT NULL,
    name text NOT NULL,
    match_key text NOT NULL,
    path text NOT NULL,
    input jsonb NOT NULL,
    output jsonb NOT NULL,
    is_error boolean NOT NULL,
    started_at timestamptz NOT NULL,
    duration_ms double precision NOT NULL,
    checksum text NOT NULL,
    PRIMARY KEY (run_id, step)
);
