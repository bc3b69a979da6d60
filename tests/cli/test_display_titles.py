"""A title that is the start of another session's id: the ambiguity error's advice works
(it named `refold sessions list --json` and "rename the session with that title", and a
rename by that title failed with the same error), and ``refuse_id_prefix_title`` — for the
stores' rename — refuses such a title."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from refold.cli.main import cli
from refold.errors import AmbiguousReference, InvalidInput
from refold.store.sqlite import SQLiteStore
from refold.store.titles import reads_as_id_prefix, refuse_id_prefix_title


def run(home: Path, *args: str) -> Result:
    env: dict[str, str | None] = {"REFOLD_HOME": None, "REFOLD_DB": None}
    return CliRunner().invoke(cli, ["--home", str(home), *args], env=env)


def test_the_ambiguity_advice_can_be_followed(tmp_path: Path) -> None:
    home = tmp_path / "h"
    home.mkdir()
    store = SQLiteStore(str(home / "refold.db"))
    try:
        mine = store.create_session(title="alpha")
        other = store.create_session(title="beta")
        for sid in (mine.id, other.id):
            store.append_messages(sid, [{"role": "user", "content": "hello"}])
    finally:
        store.close()
    prefix = other.id[:4]
    renamed = run(home, "sessions", "rename", mine.id, prefix)
    if renamed.exit_code != 0:  # the store refuses such a title: nothing to advise then
        assert prefix in str(renamed.exception)
        return
    failed = run(home, "sessions", "rename", prefix, "X")
    assert isinstance(failed.exception, AmbiguousReference)
    hint = failed.exception.hint or ""
    commands = re.findall(r"`refold ([^`]+)`", hint)
    shows = [c for c in commands if c.startswith("sessions show ")]
    renames = [c for c in commands if c.startswith("sessions rename ")]
    assert shows and renames, hint
    shown = run(home, *shows[0].split())
    assert shown.exit_code == 0 and "beta" in shown.output, shown.output
    done = run(home, *renames[0].replace("NEW_TITLE", "gamma").split())
    assert done.exit_code == 0, (done.output, done.exception)
    assert "gamma" in done.output
    after = run(home, "sessions", "show", prefix)  # the prefix is an id prefix again
    assert after.exit_code == 0 and "beta" in after.output


def test_a_title_that_is_another_sessions_id_prefix_is_refused() -> None:
    ids = ["6b57aa00" * 4, "12345678" * 4]
    with pytest.raises(InvalidInput, match="start of session 6b57aa006b57"):
        refuse_id_prefix_title("6b57", ids[1], ids)
    refuse_id_prefix_title("6b57", ids[0], ids[:1])  # its own id: not a shadow
    refuse_id_prefix_title("6b5", ids[1], ids)  # too short to be taken for a prefix
    refuse_id_prefix_title("6b57 notes", ids[1], ids)  # not an id's start
    refuse_id_prefix_title("ffff", ids[1], ids)  # no id starts so
    assert reads_as_id_prefix("6B57aa") and not reads_as_id_prefix("6b5")
    assert not reads_as_id_prefix("beta")
