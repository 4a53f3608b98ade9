"""Data: byte tokenizer, WebDataset shards, node-local cache, and exactly-once sampling per epoch."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from itertools import islice
from pathlib import Path

import pytest
from trainledger.trainer.data import (
    DataError,
    SampleStream,
    load_index,
    prepare_shards,
    shipped_corpus_dir,
    stage_to_cache,
)
from trainledger.trainer.tokenizer import ByteTokenizer
from typer.testing import CliRunner

HERE = Path(__file__).resolve().parent
SEQ = 32


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    """The shipped corpus as 32-token samples, 97 per shard (a last shard that is not full)."""
    out = tmp_path_factory.mktemp("shards") / "corpus"
    prepare_shards([shipped_corpus_dir()], out, seq_len=SEQ, shard_size=97)
    return out


def test_tokenizer_round_trip():
    tok = ByteTokenizer()
    ids = tok.encode("naïve €", eos=True)
    assert ids[-1] == 256 and max(ids[:-1]) < 256
    assert tok.decode(ids[:-1]) == "naïve €"
    assert tok.vocab_size == 257


def test_shipped_corpus_is_small_text():
    files = sorted(shipped_corpus_dir().glob("*.txt"))
    total = sum(f.stat().st_size for f in files)
    assert len(files) >= 2 and 100_000 < total < 400_000


def test_prepare_writes_webdataset_shards(shards):
    import numpy as np
    import webdataset as wds

    index = load_index(shards)
    n_tokens = index["tokens"]
    assert index["samples"] == (n_tokens - 1) // SEQ
    assert index["dropped_tail_tokens"] == n_tokens - (index["samples"] * SEQ + 1)
    assert [s["samples"] for s in index["shards"]][:-1] == [97] * (len(index["shards"]) - 1)
    assert sum(s["samples"] for s in index["shards"]) == index["samples"]
    first = sorted(shipped_corpus_dir().glob("*.txt"))[0].read_bytes()
    # Read back with the WebDataset library itself.
    samples = list(wds.WebDataset(str(shards / index["shards"][0]["name"]), shardshuffle=False,
                                  nodesplitter=None, workersplitter=None))
    assert [s["__key__"] for s in samples[:2]] == ["000000000", "000000001"]
    tokens0 = np.frombuffer(samples[0]["tokens"], dtype="<u2")
    tokens1 = np.frombuffer(samples[1]["tokens"], dtype="<u2")
    assert len(tokens0) == SEQ + 1
    assert bytes(tokens0.astype(np.uint8)) == first[: SEQ + 1]
    assert tokens1[0] == tokens0[-1]  # windows overlap by one token: every token is a target once


def test_prepare_is_deterministic_and_refuses_to_overwrite(shards, tmp_path):
    again = tmp_path / "again"
    prepare_shards([shipped_corpus_dir()], again, seq_len=SEQ, shard_size=97)
    digest = lambda d: {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir())}  # noqa: E731
    assert digest(again) == digest(shards)
    with pytest.raises(DataError, match="is not empty: choose another --out or delete it"):
        prepare_shards([shipped_corpus_dir()], again, seq_len=SEQ, shard_size=97)


def test_prepare_rejects_a_corpus_shorter_than_one_sample(tmp_path):
    (tmp_path / "a.txt").write_text("short", encoding="utf-8")
    with pytest.raises(DataError, match="fewer than one sample"):
        prepare_shards([tmp_path], tmp_path / "out", seq_len=64)


def test_stage_to_cache_copies_and_verifies(shards, tmp_path):
    cached = stage_to_cache(shards, tmp_path / "cache")
    assert cached.parent == tmp_path / "cache"
    assert load_index(cached) == load_index(shards)
    assert sorted(p.name for p in cached.iterdir()) == sorted(p.name for p in shards.iterdir())
    assert stage_to_cache(shards, tmp_path / "cache") == cached  # second call: already there
    broken = tmp_path / "broken"
    broken.mkdir()
    for p in shards.iterdir():
        (broken / p.name).write_bytes(p.read_bytes())
    name = load_index(shards)["shards"][0]["name"]
    data = bytearray((broken / name).read_bytes())
    data[600] ^= 0xFF
    (broken / name).write_bytes(bytes(data))
    with pytest.raises(DataError, match="does not match its checksum"):
        stage_to_cache(broken, tmp_path / "cache2")


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("micro,accum", [(2, 1), (3, 2)])
def test_every_sample_once_per_epoch(shards, world, micro, accum):
    """Simulated ranks of the real stream: per epoch, the ranks' keys partition all samples."""
    streams = [SampleStream(shards, dp_rank=r, dp_size=world, micro_batch=micro, grad_accum=accum, seed=7)
               for r in range(world)]
    n = streams[0].samples_per_epoch
    all_keys = {f"{i:09d}" for i in range(n)}
    for epoch in range(3):
        per_rank = [s.epoch_keys(epoch) for s in streams]
        counts = Counter(k for keys in per_rank for k in keys)
        assert set(counts) == all_keys, f"missed {len(all_keys - set(counts))}"
        assert max(counts.values()) == 1, "a sample went to two ranks"
        sizes = [len(k) for k in per_rank]
        assert max(sizes) - min(sizes) <= micro * accum  # at most one partial step apart
    # Over a whole number of steps every rank takes exactly micro × accum samples per step.
    total = [len(s.epoch_keys(0)) + len(s.epoch_keys(1)) + len(s.epoch_keys(2)) for s in streams]
    assert sum(total) == 3 * n


def test_epochs_are_reshuffled(shards):
    s = SampleStream(shards, dp_rank=0, dp_size=1, micro_batch=2, grad_accum=1, seed=7)
    assert s.epoch_keys(0) != s.epoch_keys(1)
    assert sorted(s.epoch_keys(0)) == sorted(s.epoch_keys(1))


def test_global_batch_is_the_same_set_for_any_decomposition(shards):
    """Steps hold the same samples whether G = 8 is 1×8, 2×4, 4×2 or 1×(4×2 accumulated)."""
    def step_sets(world, micro, accum, steps=40):
        streams = [SampleStream(shards, dp_rank=r, dp_size=world, micro_batch=micro, grad_accum=accum, seed=7)
                   for r in range(world)]
        per_rank = [list(islice((k for e in range(2) for k in s.epoch_keys(e)), steps * micro * accum))
                    for s in streams]
        return [frozenset(k for keys in per_rank for k in keys[i * micro * accum:(i + 1) * micro * accum])
                for i in range(steps)]

    reference = step_sets(1, 8, 1)
    assert step_sets(2, 4, 1) == reference
    assert step_sets(4, 2, 1) == reference
    assert step_sets(1, 4, 2) == reference
    assert step_sets(2, 2, 2) == reference


def test_stream_reads_what_the_arithmetic_assigns(shards):
    """The tar-reading iterator yields exactly the planned keys, across an epoch boundary."""
    s = SampleStream(shards, dp_rank=1, dp_size=3, micro_batch=2, grad_accum=2, seed=7)
    planned = s.epoch_keys(0) + s.epoch_keys(1)[:10]
    read = [k for k, _ in islice(s.samples(), len(planned))]
    assert read == planned
    x, y = next(s.micro_batches())
    assert tuple(x.shape) == tuple(y.shape) == (2, SEQ)
    assert (x[:, 1:] == y[:, :-1]).all()


@pytest.mark.slow
def test_three_real_ranks_partition_an_epoch(shards, tmp_path, launcher):
    """gloo process group of 3 ranks; each reads its share through WebDataset; keys are all-gathered."""
    out = tmp_path / "keys.json"
    cmd = launcher.torchrun_cmd(3, [str(HERE / "data_ranks_worker.py"), str(shards), str(out), "2", "3"])
    proc = launcher.run(cmd, timeout=180)
    assert proc.returncode == 0, proc.stdout[-4000:]
    got = json.loads(out.read_text(encoding="utf-8"))
    n = load_index(shards)["samples"]
    flat = [k for keys in got["keys"] for k in keys]
    assert got["world"] == 3
    assert len(flat) == len(set(flat)) == n
    assert set(flat) == {f"{i:09d}" for i in range(n)}


def test_data_prepare_command(tmp_path):
    import typer
    from trainledger.trainer.cli import data_app

    app = typer.Typer()
    app.add_typer(data_app, name="data")
    runner = CliRunner()
    out = runner.invoke(app, ["data", "prepare", str(shipped_corpus_dir()), "--out", str(tmp_path / "s"),
                              "--shard-size", "500", "--seq-len", "64"])
    assert out.exit_code == 0, out.output
    index = load_index(tmp_path / "s")
    assert f"wrote {index['samples']} samples of 64 + 1 tokens" in out.output
    assert len(index["shards"]) == -(-index["samples"] // 500)
    again = runner.invoke(app, ["data", "prepare", str(shipped_corpus_dir()), "--out", str(tmp_path / "s")])
    assert again.exit_code == 2
    assert "is not empty" in again.output
    missing = runner.invoke(app, ["data", "prepare", str(tmp_path / "nope"), "--out", str(tmp_path / "t")])
    assert missing.exit_code == 2 and "does not exist" in missing.output


def test_timed_batches_add_up_the_wait_for_each_batch_and_refuse_a_bad_knob(monkeypatch):
    from trainledger.trainer.data import DATA_DELAY_ENV, TimedBatches
    from trainledger.trainer.engine import SLOW_RANK_ENV, slow_rank

    ticks = iter(range(100))
    monkeypatch.setattr("trainledger.trainer.data.time.perf_counter", lambda: float(next(ticks)))
    batches = TimedBatches(iter(["a", "b"]), delay_s=0.0)
    assert list(batches) == ["a", "b"] and batches.waited == 3.0  # 1 s for each batch, 1 s to find the end
    monkeypatch.setenv(DATA_DELAY_ENV, "-1")
    with pytest.raises(ValueError, match=DATA_DELAY_ENV):
        TimedBatches(iter([]))
    assert slow_rank("1:0.25", 1) == 0.25 and slow_rank("1:0.25", 0) == 0.0 and slow_rank(None, 1) == 0.0
    for bad in ("0.25", "x:1", "1:nan"):
        with pytest.raises(ValueError, match=SLOW_RANK_ENV):
            slow_rank(bad, 1)
