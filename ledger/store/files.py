"""Reading the files users hand to a command (pricing TOML, rate CSVs): one-line errors naming the file."""

from __future__ import annotations

from pathlib import Path

from ledger.errors import LedgerInputError


def read_text(path: Path, encoding: str = "utf-8") -> str:
    """The text of ``path``, or a one-line error saying why it cannot be read (``FILE: …``)."""
    try:
        return Path(path).read_text(encoding=encoding)
    except OSError as exc:
        raise LedgerInputError(f"FILE: cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise LedgerInputError(f"FILE: {path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
