"""Secrets never stored: the redaction applied to a command line and an environment before they reach
the run journal or the ledger.

:func:`redact_argv` hides (``***``)

* the password of a URL with credentials (``postgresql://u:pw@db/x`` → ``postgresql://u:***@db/x``), in
  any argument;
* the value of an option whose name *ends* in a secret word (``--hf-token X``, ``--api_key=X``,
  ``--db-password X``, ``--client-secret X``, ``--wandb-key X``, ``--auth X``), in both the
  ``--flag value`` and the ``--flag=value`` form, and of a Hydra/key=value override whose last key ends
  so (``wandb.api_key=X``);
* the value of ``-p`` (``-p X``, ``-pX``: MySQL's password option; a port or a project given as ``-p`` is
  hidden too, which costs nothing);
* ``Authorization: ...`` and ``Bearer``/``Basic``/``token`` credentials inside an argument
  (``-H 'Authorization: Bearer X'``);
* ``NAME=VALUE`` arguments (``env HF_TOKEN=X python ...``) whose NAME is a secret variable
  (:func:`secret_name`), and token shapes that are secrets wherever they appear (Hugging Face ``hf_...``,
  OpenAI ``sk-...``, AWS ``AKIA...``, GitHub ``ghp_...``, Slack ``xox?-...``).

Not secrets (a counted quantity or a file, not a credential): ``--tokens 1000``, ``--max-tokens``,
``--max_new_tokens``, ``--token-budget``, ``--tokenizer``, ``--key-file``, ``--password-file``,
``TOKENIZERS_PARALLELISM``. A name is secret by its last word, so ``--hf-token`` is and
``--token-budget`` is not. False positives (``--sort-key name``) only hide a harmless value.
"""

from __future__ import annotations

import re
from typing import Mapping

MASK = "***"
#: an option or key is secret when its last word (split on -, _ and .) ends with one of these
_SECRET_END = ("token", "key", "password", "passwd", "pwd", "secret", "credential", "credentials", "auth",
               "apikey", "passphrase")
#: an environment variable is secret when one of its _-separated words is one of these, or it contains the second
_SECRET_ENV_WORDS = {"TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "PWD", "CREDENTIAL", "CREDENTIALS", "APIKEY",
                     "AUTH", "PASSPHRASE", "SIGNATURE"}
_SECRET_ENV_PARTS = ("PASSWORD", "PASSWD", "SECRET", "APIKEY")
_NOT_SECRET_ENV = {"PWD", "OLDPWD", "TOKENIZERS_PARALLELISM", "SSH_AUTH_SOCK", "GPG_AGENT_INFO", "KEYTIMEOUT"}

_URL_CRED = re.compile(r"(?P<pre>[A-Za-z][A-Za-z0-9+.\-]*://[^\s/:@]*:)(?P<pw>[^\s/@]+)(?=@)")
_AUTH_HEADER = re.compile(r"(?i)(?P<pre>\b(?:proxy-)?authorization\s*[:=]\s*)(?P<pw>.+)")
_SCHEME_CRED = re.compile(r"(?i)(?P<pre>\b(?:bearer|basic|token)\s+)(?P<pw>[A-Za-z0-9._~+/=\-]{8,})")
_TOKEN_SHAPES = re.compile(r"\b(?:hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_\-]{20,}|(?:AKIA|ASIA)[0-9A-Z]{16}"
                           r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|xox[abprs]-[A-Za-z0-9\-]{10,})\b")
_ENV_ASSIGN = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)=")


def _words(name: str) -> list[str]:
    return [w for w in re.split(r"[-_.\s]+", name.lower()) if w]


def secret_option(name: str) -> bool:
    """Whether an option (``--hf-token``) or override key (``wandb.api_key``) names a secret: its last word
    ends in a secret word (``token``, ``key``, ``password``, ``secret``, ...), never ``tokens``."""
    words = _words(name.lstrip("-+"))
    return bool(words) and words[-1].endswith(_SECRET_END)


def secret_name(name: str) -> bool:
    """Whether an environment variable names a secret (``HF_TOKEN``, ``WANDB_API_KEY``, ``PGPASSWORD``,
    ``AWS_SECRET_ACCESS_KEY``, ``MY_SECRET_X``), not ``TOKENIZERS_PARALLELISM`` or ``PWD``."""
    upper = name.upper()
    if upper in _NOT_SECRET_ENV:
        return False
    words = set(upper.split("_"))
    return bool(words & _SECRET_ENV_WORDS) or any(p in upper and p + "S" not in upper for p in _SECRET_ENV_PARTS)


def redact_text(text: str) -> str:
    """Credentials inside free text: URL passwords, ``Authorization:`` values, ``Bearer X``, known token shapes."""
    text = _URL_CRED.sub(lambda m: m.group("pre") + MASK, text)
    text = _AUTH_HEADER.sub(lambda m: m.group("pre") + MASK, text)
    text = _SCHEME_CRED.sub(lambda m: m.group("pre") + MASK, text)
    return _TOKEN_SHAPES.sub(MASK, text)


def _redact_one(arg: str) -> tuple[str, bool]:
    """One argument as recorded, and whether the next argument is the value of a secret option."""
    if arg.startswith("-") and not arg.startswith("---"):
        name, eq, value = arg.partition("=")
        if secret_option(name):
            return (f"{name}={MASK}", False) if eq else (arg, True)
        if arg == "-p":
            return arg, True
        if arg.startswith("-p") and not arg.startswith("--") and len(arg) > 2:
            return "-p" + MASK, False
        return redact_text(arg), False
    m = _ENV_ASSIGN.match(arg)
    key = arg.split("=", 1)[0]
    if (m and secret_name(m.group("name"))) or ("=" in arg and "://" not in key and " " not in key
                                                 and secret_option(key)):
        return f"{key}={MASK}", False
    return redact_text(arg), False


def redact_argv(argv: list[str]) -> list[str]:
    """The command line as it may be stored: the same arguments, credentials replaced by ``***``."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        arg = str(arg)
        if hide_next and arg != "--":
            out.append(MASK)
            hide_next = False
            continue
        red, hide_next = _redact_one(arg)
        out.append(red)
    return out


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """An environment as it may be stored: secret variables' values become ``***``, and credentials inside
    other values (a URL's password) are hidden."""
    return {k: (MASK if secret_name(k) else redact_text(str(v))) for k, v in env.items()}
