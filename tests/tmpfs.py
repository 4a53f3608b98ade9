"""A real small tmpfs that a test fills up: ENOSPC from the kernel, not a mock (root only; else the test skips)."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest


class TinyDisk:
    """``size`` bytes of tmpfs mounted at ``path``; :meth:`fill` leaves no byte free, :meth:`free` gives it back."""

    def __init__(self, path: Path, size: str = "1m"):
        self.dir = Path(path)
        self.dir.mkdir(parents=True, exist_ok=True)
        if os.geteuid() != 0:
            pytest.skip("needs root to mount a tmpfs that fills up (a real ENOSPC)")
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(self.dir)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")

    def fill(self) -> None:
        fill_to_enospc(self.dir / ".filler")

    def free(self) -> None:
        (self.dir / ".filler").unlink(missing_ok=True)

    def files(self) -> list[str]:
        return sorted(p.name for p in self.dir.iterdir() if p.name != ".filler")

    def unmount(self) -> None:
        subprocess.run(["umount", "-l", str(self.dir)], capture_output=True)


def mounted(path: Path, size: str = "1m"):
    """A fixture body: a tmpfs at ``path``, unmounted at the end (``yield from mounted(tmp_path / "disk")``)."""
    disk = TinyDisk(path, size)
    try:
        yield disk
    finally:
        disk.unmount()


def fill_to_enospc(path: Path) -> None:
    """Write ``path`` until the file system it is on has not one byte left (ENOSPC, nothing else)."""
    with open(path, "wb", buffering=0) as fh:
        for chunk in (65536, 4096, 1):
            try:
                while True:
                    fh.write(b"\0" * chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
