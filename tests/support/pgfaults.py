"""Faults made by the PostgreSQL server itself, for tests of what recording does with them."""

from __future__ import annotations

import psycopg
from psycopg import sql


def reject_rows(dsn: str, schema: str, table: str, name: str, errcode: str) -> None:
    """Make the server refuse rows of `table` named `name` (a trigger raising `errcode`)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL(
            "CREATE FUNCTION {s}.{f}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "IF NEW.name = {n} THEN RAISE EXCEPTION 'refused' USING ERRCODE = {e}; END IF; "
            "RETURN NEW; END $$; CREATE TRIGGER {f} BEFORE INSERT ON {s}.{t} FOR EACH ROW "
            "EXECUTE FUNCTION {s}.{f}()").format(
                s=sql.Identifier(schema), t=sql.Identifier(table),
                f=sql.Identifier(f"reject_{table}"), n=sql.Literal(name),
                e=sql.Literal(errcode)))
