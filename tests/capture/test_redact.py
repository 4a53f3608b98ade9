"""Secrets never stored (issue 24, item 5): real-world command-line shapes, what is hidden and what is
not, and a wrapped run whose journal and ledger hold none of the secrets it was given."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from trainledger.sources.capture.redact import redact_argv, redact_env, redact_text, secret_name, secret_option

from tests.capture.conftest import REPO, run_id_of, wrap_cmd

SECRET = "s3cr3tVALUE42"

#: (argv, as recorded): credentials hidden, everything else unchanged
HIDDEN = [
    (["--hf-token", SECRET], ["--hf-token", "***"]),
    (["--hf_token=" + SECRET], ["--hf_token=***"]),
    (["--api-key", SECRET], ["--api-key", "***"]),
    (["--api_key=" + SECRET], ["--api_key=***"]),
    (["--apiKey", SECRET], ["--apiKey", "***"]),
    (["--wandb-key", SECRET], ["--wandb-key", "***"]),
    (["--token", SECRET], ["--token", "***"]),
    (["--access-token=" + SECRET], ["--access-token=***"]),
    (["--password", SECRET], ["--password", "***"]),
    (["--db-password=" + SECRET], ["--db-password=***"]),
    (["--client-secret", SECRET], ["--client-secret", "***"]),
    (["--secret=" + SECRET], ["--secret=***"]),
    (["--aws-secret-access-key", SECRET], ["--aws-secret-access-key", "***"]),
    (["-p", SECRET], ["-p", "***"]),
    (["-p" + SECRET], ["-p***"]),
    (["--db", f"postgresql://trainer:{SECRET}@db:5432/x"], ["--db", "postgresql://trainer:***@db:5432/x"]),
    ([f"--url=https://u:{SECRET}@example.com/r.git"], ["--url=https://u:***@example.com/r.git"]),
    ([f"s3://key:{SECRET}@bucket/path"], ["s3://key:***@bucket/path"]),
    (["-H", f"Authorization: Bearer {SECRET}"], ["-H", "Authorization: ***"]),
    (["--header", f"Bearer {SECRET}"], ["--header", "Bearer ***"]),
    ([f"HF_TOKEN={SECRET}"], ["HF_TOKEN=***"]),
    ([f"WANDB_API_KEY={SECRET}"], ["WANDB_API_KEY=***"]),
    ([f"AWS_SECRET_ACCESS_KEY={SECRET}"], ["AWS_SECRET_ACCESS_KEY=***"]),
    ([f"wandb.api_key={SECRET}"], ["wandb.api_key=***"]),
    ([f"trainer.hub_token={SECRET}"], ["trainer.hub_token=***"]),
    (["--note", "hf_abcdefghijklmnopqrstuvwxyz0123"], ["--note", "***"]),
    (["AKIAABCDEFGHIJKLMNOP"], ["***"]),
    (["ghp_abcdefghijklmnopqrstuvwxyz0123456789"], ["***"]),
]

#: not secrets: counted quantities, files, names
KEPT = [
    ["--tokens", "1000"], ["--max-tokens", "512"], ["--max_new_tokens", "256"], ["--token-budget", "1e9"],
    ["--num-tokens=2048"], ["--tokenizer", "gpt2"], ["--key-file", "/etc/k.pem"], ["--password-file", "/run/pw"],
    ["--lr", "3e-4"], ["--nproc-per-node", "8"], ["train.py", "--config", "c.yaml"], ["TOKENIZERS_PARALLELISM=false"],
    ["https://example.com/data.tar"], ["--output_dir=/ckpt"], ["-m", "torch.distributed.run"], ["--", "-p"],
]


@pytest.mark.parametrize("argv,recorded", HIDDEN)
def test_credentials_are_hidden(argv, recorded):
    assert redact_argv(["python", "train.py", *argv, "--lr", "1"]) == ["python", "train.py", *recorded, "--lr", "1"]


@pytest.mark.parametrize("argv", KEPT)
def test_non_secrets_are_kept(argv):
    assert redact_argv(argv) == argv


def test_names_decide_by_their_last_word():
    assert [secret_option(n) for n in ("--hf-token", "--tokens", "--max-tokens", "--token-budget", "--api_key",
                                       "--key-file", "wandb.api_key")] == [True, False, False, False, True, False, True]
    assert [secret_name(n) for n in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "WANDB_API_KEY", "PGPASSWORD",
                                     "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "MY_SECRET_THING",
                                     "TOKENIZERS_PARALLELISM", "MAX_TOKENS", "PWD", "MASTER_ADDR", "PATH")] == \
        [True] * 7 + [False] * 5


def test_environment_and_free_text():
    env = {"HF_TOKEN": SECRET, "PATH": "/usr/bin", "DATABASE_URL": f"postgresql://u:{SECRET}@h/db",
           "TOKENIZERS_PARALLELISM": "false"}
    assert redact_env(env) == {"HF_TOKEN": "***", "PATH": "/usr/bin", "DATABASE_URL": "postgresql://u:***@h/db",
                               "TOKENIZERS_PARALLELISM": "false"}
    assert redact_text(f"connect failed: postgresql://u:{SECRET}@h/db") == "connect failed: postgresql://u:***@h/db"


@pytest.mark.slow
def test_a_wrapped_run_stores_no_secret_in_its_journal_or_ledger(ledger_url, capture_env, tmp_path):
    secrets = [SECRET, "hf_abcdefghijklmnopqrstuvwxyz0123", "AKIAABCDEFGHIJKLMNOP",
               "ghp_abcdefghijklmnopqrstuvwxyz0123456789"]
    # the job fails and prints a URL with its password on stderr: the stored error tail is redacted too
    cmd = [sys.executable, "-c", f"import sys; print('cannot reach postgresql://u:{SECRET}@db/x', file=sys.stderr); "
           "sys.exit(1)", *[a for argv, _ in HIDDEN for a in argv]]
    out = subprocess.run(wrap_cmd(ledger_url, command=cmd), env=capture_env, capture_output=True, cwd=REPO, timeout=120)
    assert out.returncode == 1, out.stderr.decode()
    journal = Path(capture_env["TRAINLEDGER_JOURNAL_DIR"])
    texts = [p.read_text() for p in journal.iterdir()]
    assert texts and all(s not in t for s in secrets for t in texts)
    stored = _ledger_text(ledger_url)
    assert run_id_of(out.stderr) in stored and "--hf-token" in stored  # the command is there ...
    assert not [s for s in secrets if s in stored]  # ... without a secret
    assert "postgresql://u:***@db/x" in stored


def _ledger_text(url: str) -> str:
    """Every row of every table of the ledger, as text."""
    from sqlalchemy import MetaData, select
    from trainledger.store.db import make_engine

    engine = make_engine(url)
    try:
        meta = MetaData()
        meta.reflect(engine)
        with engine.connect() as conn:
            return "\n".join(json.dumps([list(map(str, row)) for row in conn.execute(select(table))])
                             for table in meta.sorted_tables)
    finally:
        engine.dispose()
