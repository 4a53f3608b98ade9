"""Capturing a job as it runs: the run wrapper and its keeper, `trainledger.track`, signal handling, redaction of secrets and the test-only hold."""
