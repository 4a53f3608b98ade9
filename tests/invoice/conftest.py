"""The dashboard tests of invoices use the dashboard's own fixture (loopback, no auth file, fresh caches)."""

from tests.app.conftest import app_env  # noqa: F401
