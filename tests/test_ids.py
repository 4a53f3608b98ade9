"""Run ids: one rule on every way in, and the id of a Slurm job."""

import pytest
from trainledger.errors import LedgerInputError
from trainledger.store.ids import MAX_RUN_ID, new_run_id, slurm_run_id, validate_run_id


@pytest.mark.parametrize("text", ["demo-0001", "a1b2c3d4e5f60718", "slurm-7", "x.y_z-1", "A" * MAX_RUN_ID])
def test_valid_run_ids_pass_unchanged(text):
    assert validate_run_id(text) == text


@pytest.mark.parametrize("text, why", [
    ("", "empty"), ("../../../../var/log/dpkg", "not a run id"), ("a/b", "not a run id"), ("a..b", "not a run id"),
    (".hidden", "not a run id"), ("-rf", "not a run id"), ("run id", "not a run id"), ("x" * (MAX_RUN_ID + 1), "characters"),
    ("ü", "not a run id"), ("a\nb", "not a run id"),
])
def test_invalid_run_ids_are_one_line_errors_naming_the_field(text, why):
    with pytest.raises(LedgerInputError) as exc:
        validate_run_id(text, "--run-id")
    assert str(exc.value).startswith("--run-id: ") and why in str(exc.value) and "\n" not in str(exc.value)


def test_slurm_job_ids():
    assert slurm_run_id("1234") == "slurm-1234"
    assert slurm_run_id("1234_7", "gpu") == "slurm-gpu-1234_7"
    assert slurm_run_id("99+1") == "slurm-99.1"
    assert validate_run_id(new_run_id()) and len(new_run_id()) == 16
