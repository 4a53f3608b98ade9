"""Byte-level tokenizer: UTF-8 bytes are tokens 0–255, 256 ends a document. No downloads."""

from __future__ import annotations

from typing import Iterable

from trainledger.trainer.shapes import BYTE_VOCAB_SIZE


class ByteTokenizer:
    """Token id = UTF-8 byte value; ``eos_id`` (256) separates documents."""

    name = "bytes"
    vocab_size = BYTE_VOCAB_SIZE
    eos_id = 256

    def encode(self, text: str, eos: bool = False) -> list[int]:
        """Token ids of ``text``, with ``eos_id`` appended when ``eos``."""
        ids = list(text.encode("utf-8"))
        if eos:
            ids.append(self.eos_id)
        return ids

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids``; an end-of-document token becomes a blank line, broken UTF-8 becomes U+FFFD."""
        out = bytearray()
        for i in ids:
            i = int(i)
            if i == self.eos_id:
                out += b"\n\n"
            elif 0 <= i < 256:
                out.append(i)
            else:
                raise ValueError(f"token id {i} is outside the byte vocabulary (0–{self.eos_id})")
        return out.decode("utf-8", errors="replace")

    def to_dict(self) -> dict:
        return {"name": self.name, "vocab_size": self.vocab_size, "eos_id": self.eos_id}
