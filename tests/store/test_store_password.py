"""The database password in `--db` (or [store] url) is never printed: not in the line that ends
every run (which the README's cron line appends to a log), not in a listing, not in an error,
on a real PostgreSQL server that checks the password."""

from __future__ import annotations

import secrets
import uuid

import pytest

from tests.support.cli import prober
from tests.support.postgres import create_password_user

pytestmark = pytest.mark.infra


def test_the_database_password_never_reaches_the_output(tmp_path, postgres_url):
    user = f"pw_{uuid.uuid4().hex[:12]}"
    password = f"pw-canary-{secrets.token_hex(12)}"
    url = create_password_user(postgres_url, user, password)
    assert password in url

    ran = prober("run", "--suite", "latency", "--target", "emulator", "--param", "levels=[1]",
                 "--param", "requests_per_level=2", "--param", "max_tokens=8", "--db", url, cwd=tmp_path,
                 timeout=300)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert f"samples stored in postgresql+psycopg://{user}:***@" in ran.stderr
    listed = prober("runs", "--db", url, cwd=tmp_path)
    assert listed.returncode == 0 and "latency" in listed.stdout
    missing = prober("show", "no-such-run", "--db", url, cwd=tmp_path)
    assert missing.returncode == 2
    assert f"no run with id 'no-such-run' in postgresql+psycopg://{user}:***@" in missing.stderr
    # The server really checks it: a wrong password is refused, in a message that shows neither.
    wrong = f"wrong-{secrets.token_hex(12)}"
    refused = prober("runs", "--db", url.replace(password, wrong), cwd=tmp_path)
    assert refused.returncode == 2, refused.stderr
    assert "password authentication failed" in " ".join(refused.stderr.split())
    for done in (ran, listed, missing, refused):
        assert password not in done.stdout + done.stderr and wrong not in done.stdout + done.stderr
