"""Token shards in WebDataset format: prepare, stage to node-local disk, and stream exactly once per epoch.

**Shards.** ``prepare_shards`` turns text files into ``shard-NNNNNN.tar`` files
(the WebDataset layout: one tar member ``<key>.tokens`` per sample) plus an
``index.json`` listing shards, sample counts, checksums and the tokenizer.
A sample is ``seq_len + 1`` byte tokens (little-endian uint16), windows taken
with stride ``seq_len`` from the concatenated documents (an end-of-document
token after each file), so every token but the first is a target once. The
tail shorter than a window is dropped (``dropped_tail_tokens`` in the index).
Tars are written with fixed metadata: the same input gives identical bytes.

**Cache.** ``stage_to_cache`` copies a shard directory to a node-local cache
(remote or network storage stalls training); one process per node copies,
the others wait. A text corpus is prepared straight into the cache.

**Exactly once per epoch.** Epoch e visits all N samples in one global order
(shards permuted by (seed, e), samples permuted within each shard). Stream
position s = e·N + p (p the position within the epoch) belongs to optimizer
step ⌊s / G⌋ with G = micro_batch × grad_accum × dp (the global batch); in
that step, data-parallel rank r takes the B = G / dp positions with
⌊(s mod G) / B⌋ = r, micro-batch j the j-th ``micro_batch`` of them. So each
sample of an epoch goes to exactly one rank whatever the world size, every
rank takes exactly B samples per step (ranks stay in lockstep; an epoch's end
need not fall on a step boundary), and the global batch of a step is the
same set of samples for any dp × micro_batch × grad_accum decomposition of
G — which is what lets every strategy reproduce the dp loss. Each rank reads
only the shards holding its samples (for small G that is every shard).
"""

from __future__ import annotations

import array
import hashlib
import io
import json
import os
import random
import shutil
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Iterable, Iterator, Optional, Sequence

from trainledger.trainer.tokenizer import ByteTokenizer

FORMAT = "trainledger-shards/1"
INDEX = "index.json"
SAMPLE_EXT = "tokens"


class DataError(ValueError):
    """A data problem; the message is one line saying what to change."""


# --------------------------------------------------------------------------- prepare


def text_files(sources: Sequence[str | Path]) -> list[Path]:
    """The text files named by ``sources``: files as given, directories searched for ``*.txt``, sorted."""
    files: list[Path] = []
    for src in sources:
        src = Path(src)
        if src.is_dir():
            found = sorted(p for p in src.rglob("*.txt") if p.is_file())
            if not found:
                raise DataError(f"{src} holds no *.txt files")
            files.extend(found)
        elif src.is_file():
            files.append(src)
        else:
            raise DataError(f"{src} does not exist")
    if not files:
        raise DataError("no text files given")
    return files


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _tar_member(tar: tarfile.TarFile, name: str, payload: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(payload)
    info.mtime = 0
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    tar.addfile(info, io.BytesIO(payload))


def prepare_shards(
    sources: Sequence[str | Path],
    out_dir: str | Path,
    seq_len: int,
    shard_size: int = 256,
    overwrite: bool = False,
) -> dict:
    """Tokenize text files into WebDataset tar shards of ``shard_size`` samples; return the index.

    Writes into a temporary sibling directory and renames it into place, so
    ``out_dir`` either holds a complete shard set or nothing.
    """
    if seq_len < 1:
        raise DataError(f"--seq-len must be ≥ 1, got {seq_len}")
    if shard_size < 1:
        raise DataError(f"--shard-size must be ≥ 1 sample, got {shard_size}")
    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()) and not overwrite:
        raise DataError(f"{out_dir} is not empty: choose another --out or delete it")
    files = text_files(sources)
    tok = ByteTokenizer()
    stream, source_info = _tokenize_files(files, tok)
    n_samples = _sample_count(len(stream), seq_len)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        shards = _write_shards(tmp, stream, seq_len, n_samples, shard_size)
        index = {
            "format": FORMAT,
            "tokenizer": tok.to_dict(),
            "seq_len": seq_len,
            "sample_tokens": seq_len + 1,
            "dtype": "uint16-le",
            "samples": n_samples,
            "tokens": len(stream),
            "dropped_tail_tokens": len(stream) - (n_samples * seq_len + 1),
            "shard_size": shard_size,
            "shards": shards,
            "sources": source_info,
        }
        (tmp / INDEX).write_text(json.dumps(index, indent=1) + "\n", encoding="utf-8")
        return _move_into_place(tmp, out_dir, overwrite, index)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _tokenize_files(files: list[Path], tok: ByteTokenizer) -> tuple[array.array, list[dict]]:
    """The files' tokens concatenated (an end-of-document token after each), and a record of each file."""
    stream = array.array("H")
    source_info = []
    for path in files:
        raw = path.read_bytes()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DataError(f"{path} is not UTF-8 text (byte {exc.start})") from None
        stream.extend(tok.encode(text, eos=True))
        source_info.append({"path": path.name, "bytes": len(raw), "sha256": _sha256(raw)})
    if stream.itemsize != 2:
        raise DataError("this platform has no 2-byte unsigned array type")
    return stream, source_info


def _sample_count(n_tokens: int, seq_len: int) -> int:
    """Windows of seq_len + 1 tokens at stride seq_len that fit in ``n_tokens``; none is an error."""
    window = seq_len + 1
    n_samples = (n_tokens - 1) // seq_len if n_tokens >= window else 0
    if n_samples == 0:
        raise DataError(
            f"the corpus has {n_tokens} tokens, fewer than one sample of seq_len + 1 = {window}: "
            f"add text or lower --seq-len"
        )
    return n_samples


def _write_shards(tmp: Path, stream: array.array, seq_len: int, n_samples: int, shard_size: int) -> list[dict]:
    """Write the samples as ``shard-NNNNNN.tar`` files into ``tmp``; return their index entries."""
    window = seq_len + 1
    shards = []
    for first in range(0, n_samples, shard_size):
        count = min(shard_size, n_samples - first)
        name = f"shard-{first // shard_size:06d}.tar"
        with tarfile.open(tmp / name, "w", format=tarfile.USTAR_FORMAT) as tar:
            for i in range(first, first + count):
                sample = stream[i * seq_len : i * seq_len + window]
                if sys.byteorder != "little":
                    sample.byteswap()
                _tar_member(tar, f"{i:09d}.{SAMPLE_EXT}", sample.tobytes())
        shards.append({"name": name, "first": first, "samples": count,
                       "bytes": (tmp / name).stat().st_size, "sha256": _file_sha256(tmp / name)})
    return shards


def _move_into_place(tmp: Path, out_dir: Path, overwrite: bool, index: dict) -> dict:
    """Rename ``tmp`` to ``out_dir`` and return the index there (another process's, if it finished first)."""
    if out_dir.exists():
        shutil.rmtree(out_dir) if overwrite else out_dir.rmdir()
    try:
        os.rename(tmp, out_dir)
    except OSError:
        if (out_dir / INDEX).exists():  # another process on this node finished the same job first
            shutil.rmtree(tmp, ignore_errors=True)
            return load_index(out_dir)
        raise
    return index


def load_index(shard_dir: str | Path) -> dict:
    """Read and check a shard directory's ``index.json``."""
    path = Path(shard_dir) / INDEX
    try:
        index = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"{shard_dir} has no {INDEX}: prepare it with `trainledger data prepare`") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise DataError(f"cannot read {path}: {exc}") from None
    if index.get("format") != FORMAT:
        raise DataError(f"{path} has format {index.get('format')!r}, expected {FORMAT!r}: re-run prepare")
    return index


# --------------------------------------------------------------------------- corpus and cache


def shipped_corpus_dir() -> Path:
    """The small corpus shipped with the package (``data/corpus``)."""
    try:
        from importlib.resources import files

        path = Path(str(files("trainledger.data") / "corpus"))
        if path.is_dir():
            return path
    except (ImportError, ModuleNotFoundError):
        pass
    return Path(__file__).resolve().parent.parent / "data" / "corpus"


def default_cache_dir() -> Path:
    """``$TRAINLEDGER_CACHE_DIR``, else ``~/.cache/trainledger`` (put it on node-local disk)."""
    env = os.environ.get("TRAINLEDGER_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "trainledger"


def corpus_cache_key(sources: Sequence[str | Path], seq_len: int, shard_size: int) -> str:
    """Content hash naming a prepared corpus in the cache: files, seq_len, shard size, format."""
    h = hashlib.sha256(f"{FORMAT}|{seq_len}|{shard_size}".encode())
    for path in text_files(sources):
        h.update(path.name.encode() + b"\0" + _file_sha256(path).encode())
    return h.hexdigest()[:16]


def prepare_corpus_cached(sources: Sequence[str | Path], cache_dir: str | Path, seq_len: int,
                          shard_size: int) -> Path:
    """Prepare a text corpus into ``cache_dir/corpus-<hash>`` unless it is there already."""
    out = Path(cache_dir) / f"corpus-{corpus_cache_key(sources, seq_len, shard_size)}"
    if (out / INDEX).exists():
        return out
    import fcntl

    out.parent.mkdir(parents=True, exist_ok=True)
    # every rank of every run on this node may get here at once: one prepares, the others wait for it
    # (without the lock, a late process could delete a cache another had just completed, or fail on it)
    with open(out.parent / f".{out.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / INDEX).exists():
            if out.exists():  # a crashed earlier attempt
                shutil.rmtree(out, ignore_errors=True)
            prepare_shards(sources, out, seq_len=seq_len, shard_size=shard_size)
    return out


def stage_to_cache(shard_dir: str | Path, cache_dir: str | Path) -> Path:
    """Copy a shard directory to ``cache_dir/shards-<hash of index>`` and return the local copy.

    Files are copied to a temporary name, checked against the index's
    SHA-256, and renamed into place; ``index.json`` goes last, so its presence
    marks a complete copy. Already cached shards of the right size are kept.
    """
    src = Path(shard_dir)
    index = load_index(src)
    raw_index = (src / INDEX).read_bytes()
    dst = Path(cache_dir) / f"shards-{_sha256(raw_index)[:16]}"
    if src.resolve() == dst.resolve() or (dst / INDEX).exists():
        return dst
    dst.mkdir(parents=True, exist_ok=True)
    for shard in index["shards"]:
        target = dst / shard["name"]
        if target.exists() and target.stat().st_size == shard["bytes"]:
            continue
        tmp = dst / f".{shard['name']}.{os.getpid()}"
        shutil.copyfile(src / shard["name"], tmp)
        if _file_sha256(tmp) != shard["sha256"]:
            tmp.unlink()
            raise DataError(f"{src / shard['name']} does not match its checksum in {INDEX}: re-run prepare")
        os.replace(tmp, target)
    tmp = dst / f".{INDEX}.{os.getpid()}"
    tmp.write_bytes(raw_index)
    os.replace(tmp, dst / INDEX)
    return dst


# --------------------------------------------------------------------------- exactly-once stream


class SampleStream:
    """One data-parallel rank's samples, in step order, endlessly over epochs (see the module docstring)."""

    def __init__(self, shard_dir: str | Path, *, dp_rank: int, dp_size: int, micro_batch: int,
                 grad_accum: int, seed: int) -> None:
        if not 0 <= dp_rank < dp_size:
            raise ValueError(f"dp_rank {dp_rank} outside 0..{dp_size - 1}")
        self.shard_dir = Path(shard_dir)
        self.index = load_index(self.shard_dir)
        self.dp_rank, self.dp_size = dp_rank, dp_size
        self.micro_batch, self.grad_accum = micro_batch, grad_accum
        self.per_rank = micro_batch * grad_accum          # B
        self.global_batch = self.per_rank * dp_size       # G
        self.seed = seed
        self.shards = self.index["shards"]
        self.samples_per_epoch = int(self.index["samples"])  # N
        self.seq_len = int(self.index["seq_len"])

    def epoch_order(self, epoch: int) -> list[tuple[int, list[int]]]:
        """Epoch ``epoch``'s global order: (shard number, local sample indices in order) per shard."""
        shard_ids = list(range(len(self.shards)))
        random.Random(f"{self.seed}:{epoch}").shuffle(shard_ids)
        order = []
        for k in shard_ids:
            local = list(range(self.shards[k]["samples"]))
            random.Random(f"{self.seed}:{epoch}:{k}").shuffle(local)
            order.append((k, local))
        return order

    def owner(self, stream_pos: int) -> int:
        """The data-parallel rank that trains on stream position s: ⌊(s mod G) / B⌋."""
        return (stream_pos % self.global_batch) // self.per_rank

    def rank_plan(self, epoch: int, rank: Optional[int] = None) -> list[tuple[int, list[int]]]:
        """The (shard, local indices) that ``rank`` (default: this rank) takes in ``epoch``, in order."""
        rank = self.dp_rank if rank is None else rank
        s = epoch * self.samples_per_epoch
        plan = []
        for k, local in self.epoch_order(epoch):
            mine = [i for j, i in enumerate(local) if self.owner(s + j) == rank]
            s += len(local)
            if mine:
                plan.append((k, mine))
        return plan

    def key(self, shard: int, local: int) -> str:
        return f"{self.shards[shard]['first'] + local:09d}"

    def epoch_keys(self, epoch: int, rank: Optional[int] = None) -> list[str]:
        """Sample keys ``rank`` takes in ``epoch`` (the arithmetic only, no reading)."""
        return [self.key(k, i) for k, idx in self.rank_plan(epoch, rank) for i in idx]

    def read_shard(self, shard: int, wanted: Iterable[int]) -> dict[int, bytes]:
        """Raw token bytes of the wanted local indices of one shard, read with WebDataset."""
        import webdataset as wds

        first = self.shards[shard]["first"]
        wanted_keys = {f"{first + i:09d}": i for i in wanted}
        url = str(self.shard_dir / self.shards[shard]["name"])
        pipeline = wds.WebDataset(url, shardshuffle=False, nodesplitter=None, workersplitter=None,
                                  empty_check=False)
        out = {}
        for sample in pipeline:
            local = wanted_keys.get(sample["__key__"])
            if local is not None:
                out[local] = sample[SAMPLE_EXT]
        missing = set(wanted_keys.values()) - set(out)
        if missing:
            raise DataError(f"{url} lacks {len(missing)} samples listed in {INDEX}: re-run prepare")
        return out

    def samples(self, start_epoch: int = 0) -> Iterator[tuple[str, bytes]]:
        """(key, little-endian uint16 token bytes) for this rank, endlessly."""
        epoch = start_epoch
        while True:
            for k, idx in self.rank_plan(epoch):
                data = self.read_shard(k, idx)
                for i in idx:
                    yield self.key(k, i), data[i]
            epoch += 1

    def micro_batches(self, device: str = "cpu") -> Iterator[tuple["torch.Tensor", "torch.Tensor"]]:  # noqa: F821
        """(inputs, targets) LongTensors of shape (micro_batch, seq_len), endlessly."""
        import numpy as np
        import torch

        it = self.samples()
        while True:
            rows = [np.frombuffer(next(it)[1], dtype="<u2") for _ in range(self.micro_batch)]
            tokens = torch.from_numpy(np.stack(rows).astype(np.int64))
            yield tokens[:, :-1].to(device), tokens[:, 1:].to(device)


# --------------------------------------------------------------------------- data waits

#: test-only: every batch takes this many more seconds to arrive (a deliberately slow loader); unset: none
DATA_DELAY_ENV = "TRAINLEDGER_TEST_DATA_DELAY_S"


def knob_seconds(name: str, value: Optional[str]) -> float:
    """A test knob's seconds (``""``/None: 0); anything but a finite number ≥ 0 is an error naming the variable."""
    if not value:
        return 0.0
    try:
        secs = float(value)
    except ValueError:
        secs = -1.0
    if not (0 <= secs < float("inf")):
        raise ValueError(f"{name}: expected seconds ≥ 0, got {value!r}")
    return secs


class TimedBatches:
    """An iterator of batches that adds up how long the training loop was blocked waiting for the next one
    (``waited``, seconds): the goodput account's ``data_wait``. ``TRAINLEDGER_TEST_DATA_DELAY_S`` (test-only)
    makes each batch that much slower, inside the timed wait."""

    def __init__(self, batches: Iterator, delay_s: Optional[float] = None):
        self.batches = batches
        self.waited = 0.0
        self.delay_s = knob_seconds(DATA_DELAY_ENV, os.environ.get(DATA_DELAY_ENV)) if delay_s is None else delay_s

    def __iter__(self) -> "TimedBatches":
        return self

    def __next__(self):
        start = time.perf_counter()
        try:
            if self.delay_s:
                time.sleep(self.delay_s)
            return next(self.batches)
        finally:
            self.waited += time.perf_counter() - start
