"""Finding rows by what users type: a run by id or unique prefix, a project or user by name."""

from __future__ import annotations

from typing import Optional

from sqlmodel import Session, select
from trainledger.errors import LedgerInputError
from trainledger.store.models import Run


def get_run(session: Session, run_id: str) -> Run:
    """The run with this id, or the only run whose id starts with it (6+ characters); else a one-line error."""
    run = session.get(Run, run_id)
    if run is None:
        matches = session.exec(select(Run).where(Run.id.startswith(run_id)).limit(2)).all() if len(run_id) >= 6 else []
        if len(matches) == 1:
            return matches[0]
        raise unknown_run(run_id)
    return run


def unknown_run(run_id: str) -> LedgerInputError:
    """The one-line error for a run id that names no run (the dashboard gives it for a run outside a user's scope too)."""
    return LedgerInputError(f"RUN_ID: no run {run_id!r} in this ledger; see `trainledger runs list`")


def by_name(session: Session, model, name: str, flag: str, what: str):
    """The row of ``model`` called ``name``, else a one-line error naming ``flag`` and the names there are."""
    row = session.exec(select(model).where(model.name == name)).first()
    if row is None:
        names = session.exec(select(model.name).order_by(model.name)).all()
        raise LedgerInputError(f"{flag}: unknown {what} {name!r}; use one of {', '.join(names) or '(none)'}")
    return row


def get_or_create(session: Session, model, name: Optional[str]) -> Optional[int]:
    """Id of the Project/User called ``name``, created if new (None for no name).

    Safe under concurrent writers on both backends: the row is created with
    ``INSERT ... ON CONFLICT (name) DO NOTHING`` and then read back, so two
    transactions creating the same new name both get its id (on PostgreSQL the
    second waits for the first to commit) instead of one failing on the unique
    index.
    """
    if not name:
        return None
    found = session.exec(select(model.id).where(model.name == name)).first()
    if found is not None:
        return found
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":  # imported here: the PostgreSQL dialect costs a SQLite ledger 40 ms of start-up
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    fresh = model(name=name)  # the model's own defaults (a User's role) for the row
    values = {c.name: getattr(fresh, c.name) for c in model.__table__.columns if c.name != "id"}
    session.execute(insert(model).values(**values).on_conflict_do_nothing(index_elements=["name"]))
    return session.exec(select(model.id).where(model.name == name)).one()
