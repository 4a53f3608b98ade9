"""Errors a user can act on. The CLI prints ``str(err)`` as one line and exits 2."""


class LedgerInputError(ValueError):
    """Bad input (file, argument, form field); the message names the field and the fix."""


class LedgerURLError(ValueError):
    """A ledger URL that cannot be used (:mod:`trainledger.store.db`)."""
