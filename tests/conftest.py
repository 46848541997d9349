"""Shared fixtures. Infrastructure fixtures live in tests/support/ and are imported here so that
every test module can use them by name."""

from tests.support.alertmanager import alertmanager_url  # noqa: F401
from tests.support.llama import llama_servers  # noqa: F401
from tests.support.postgres import postgres_url  # noqa: F401
