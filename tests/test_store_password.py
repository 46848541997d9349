"""The database password in `--db` (or [store] url) is never printed: not in the line that ends
every run (which the README's cron line appends to a log), not in a listing, not in an error."""

from __future__ import annotations

import secrets
import uuid

from sqlalchemy.engine import make_url

from tests.support.cli import prober
from tests.support.postgres import create_database


def test_the_database_password_never_reaches_the_output(tmp_path, postgres_url):
    # The test cluster trusts local connections, so it accepts (and ignores) any password: what
    # is checked here is what prober prints, on a real PostgreSQL store.
    password = f"pw-canary-{secrets.token_hex(12)}"
    database = create_database(postgres_url, f"password_{uuid.uuid4().hex[:12]}")
    url = make_url(database).set(password=password).render_as_string(hide_password=False)
    assert password in url

    ran = prober("run", "--suite", "latency", "--target", "emulator", "--param", "levels=[1]",
                 "--param", "requests_per_level=2", "--param", "max_tokens=8", "--db", url, cwd=tmp_path,
                 timeout=300)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "samples stored in postgresql+psycopg://postgres:***@" in ran.stderr
    listed = prober("runs", "--db", url, cwd=tmp_path)
    assert listed.returncode == 0 and "latency" in listed.stdout
    missing = prober("show", "no-such-run", "--db", url, cwd=tmp_path)
    assert missing.returncode == 2 and "no run with id 'no-such-run' in postgresql+psycopg://postgres:***@" in missing.stderr
    for done in (ran, listed, missing):
        assert password not in done.stdout + done.stderr
