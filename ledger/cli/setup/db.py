"""``trainledger db``: upgrade the schema, back up and restore, check the rollup."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from trainledger.cli import progress
from trainledger.cli.common import DbOpt, JsonOpt, command, emit, group
from trainledger.errors import LedgerInputError
from trainledger.store.files import is_stdout

app = group("Ledger database: upgrade the schema, back up and restore.")


@app.command("upgrade")
@command
def db_upgrade(db: DbOpt = None, revision: Annotated[str, typer.Option(help="Target revision.")] = "head",
               as_json: JsonOpt = False) -> None:
    """Apply pending schema migrations (the CLI also does this on first use)."""
    from alembic.script import ScriptDirectory
    from alembic.util import CommandError
    from trainledger.store.db import (
        alembic_config,
        current_revision,
        make_engine,
        redact_url,
        resolve_url,
        upgrade_schema,
    )

    known = [r.revision for r in ScriptDirectory.from_config(alembic_config(None)).walk_revisions()]
    if revision != "head" and revision not in known:
        raise LedgerInputError(f"--revision: expected head or one of {', '.join(sorted(known))}, got {revision!r}")
    engine = make_engine(db, upgrade=False)
    try:
        upgrade_schema(engine, revision)
    except CommandError as exc:
        raise LedgerInputError(f"--revision: {' '.join(str(exc).split())}") from None
    rev = current_revision(engine)  # never older than it was: upgrade does not downgrade
    emit({"ledger": redact_url(resolve_url(db)), "revision": rev}, as_json,
         lambda d: f"ledger {d['ledger']} at revision {d['revision']}")


@app.command("backup")
@command
def db_backup(out: Annotated[Path, typer.Option("--out", "-o", help="Backup file to write (an existing file needs --force); -: standard output, not to a terminal (`-o - | ssh host 'cat > ledger.bak'`).")],
              db: DbOpt = None,
              force: Annotated[bool, typer.Option("--force", help="Replace an existing --out file.")] = False,
              as_json: JsonOpt = False) -> None:
    """Back up the ledger (SQLite online backup API; pg_dump custom format for PostgreSQL)."""
    from trainledger.store.backup import backup

    path = backup(db, out, force=force)
    if is_stdout(path):  # `-o -`: the backup's bytes, and nothing else, on standard output
        return
    emit({"backup": str(path), "bytes": path.stat().st_size}, as_json, lambda d: f"backup written to {d['backup']}")


@app.command("restore")
@command
def db_restore(file: Annotated[Path, typer.Argument(help="A file written by `trainledger db backup`.")],
               db: DbOpt = None,
               force: Annotated[bool, typer.Option("--force", help="Replace a ledger that already has runs.")] = False,
               as_json: JsonOpt = False) -> None:
    """Restore the ledger from a backup: only a file whose schema is exactly a trainledger ledger's (no extra
    triggers, views or tables; SQLite integrity_check; pg_restore --list checks), and runs are replaced only with --force."""
    from trainledger.store.backup import restore

    restore(db, file, force=force)
    emit({"restored_from": str(file)}, as_json, lambda d: f"restored from {d['restored_from']}")


@app.command("rollup")
@command
def db_rollup(db: DbOpt = None,
              rebuild: Annotated[bool, typer.Option("--rebuild", help="Rebuild the monthly rollup from the run rows.")] = False) -> None:
    """Check the pre-aggregated monthly rollup against the run rows (exit 1 on a difference); --rebuild it."""
    from sqlmodel import Session
    from trainledger.money.facts import rollup
    from trainledger.store.db import get_engine

    with Session(get_engine(db)) as s:
        if rebuild:
            with progress.bar("rebuilding the rollup", unit="runs") as bar:
                n = rollup.rebuild(s, progress=bar if bar.drawn else None)
                s.commit()
            typer.echo(f"rollup rebuilt from {n:,} runs")
            return
        problems = rollup.check(s)
    for p in problems[:20]:
        typer.echo(p, err=True)
    if problems:
        typer.echo(f"rollup: {len(problems)} difference(s) from the run rows; fix with `trainledger db rollup --rebuild`", err=True)
        raise typer.Exit(1)
    typer.echo("rollup consistent with the run rows")


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="db")
