"""The ledger's schema history (Alembic revisions in ``versions/``)."""

#: the newest migration; a test keeps it equal to Alembic's head. Every CLI command checks the ledger against it
#: with one plain query, so Alembic is imported only when there is work to do; the run wrapper's check before its
#: command starts reads it without SQLAlchemy (:mod:`trainledger.sources.capture.precheck`).
HEAD_REVISION = "0022"
