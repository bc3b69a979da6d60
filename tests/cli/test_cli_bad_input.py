"""Bad input to ``refold import`` (issue 14): a clear ``error:`` and exit 2, or a reported
repair — never a traceback, never silent."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from refold.errors import InvalidInput
from refold.messages.load import MAX_DEPTH, Utf8Repair, load_messages, load_messages_file


def _refold(home: Path, *args: str, stdin: bytes | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    import os

    full = {**os.environ, "REFOLD_HOME": str(home), **(env or {})}
    full.pop("REFOLD_DB", None)
    return subprocess.run([sys.executable, "-m", "refold.cli.main", *args], input=stdin,
                          capture_output=True, env=full, timeout=60)


def _refused(proc: subprocess.CompletedProcess[bytes], words: str) -> None:
    err = proc.stderr.decode()
    assert proc.returncode == 2, err
    assert err.startswith("error: ") and words in err and "Traceback" not in err, err


def test_json_nested_100000_deep_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text('[{"role": "user", "content": ' + "[" * 100_000 + "]" * 100_000 + "}]")
    _refused(_refold(tmp_path / "home", "import", str(path)), "nested deeper than")
    jsonl = tmp_path / "deep.jsonl"
    jsonl.write_text('{"role": "user", "content": "ok"}\n'
                     '{"role": "user", "content": ' + "[" * 50_000 + "]" * 50_000 + "}\n")
    _refused(_refold(tmp_path / "home", "import", str(jsonl)), "line 2: JSON nested deeper")


def test_moderate_depth_beyond_the_limit_is_refused_too() -> None:
    deep = "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)
    with pytest.raises(InvalidInput, match="nested deeper"):
        load_messages('[{"role": "user", "content": "x", "extra": ' + deep + "}]")


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_refused(tmp_path: Path, constant: str) -> None:
    path = tmp_path / "nan.jsonl"
    path.write_text('{"role": "user", "content": "a"}\n'
                    f'{{"role": "assistant", "content": "b", "score": {constant}}}\n')
    _refused(_refold(tmp_path / "home", "import", str(path)), f"{constant} is not valid JSON")
    with pytest.raises(InvalidInput, match="not valid JSON"):
        load_messages(f'[{{"role": "user", "content": "a", "x": {constant}}}]')


def test_invalid_utf8_is_repaired_and_reported(tmp_path: Path) -> None:
    good = b'{"role": "user", "content": "first"}\n'
    bad = b'{"role": "assistant", "content": "caf\xe9 and \xff\xfe"}\n'
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(good + bad)
    proc = _refold(tmp_path / "home", "import", str(path), "--json")
    assert proc.returncode == 0, proc.stderr.decode()
    report = json.loads(proc.stdout)
    first = len(good) + bad.index(b"\xe9")
    assert report["utf8_repaired"] == {"count": 3, "first_offset": first}
    assert f"replaced 3 invalid UTF-8 sequence(s) with U+FFFD, the first at byte {first}" in \
        proc.stderr.decode()
    repair = Utf8Repair()
    messages = load_messages_file(path, repair=repair)
    assert messages[1]["content"] == "caf\ufffd and \ufffd\ufffd"
    assert (repair.count, repair.first_offset) == (3, first)


@pytest.mark.parametrize("fmt", ["openai", "anthropic"])
def test_the_utf8_repair_is_reported_once(tmp_path: Path, fmt: str) -> None:
    """One warning line for one repair: the readers logged it as well as the CLI printing it
    (twice more for an Anthropic file), so stderr said the same thing two or three times."""
    bad = b'{"role": "user", "content": "caf\xe9"}'
    path = tmp_path / "latin1.json"
    path.write_bytes(b'{"system": "s", "messages": [' + bad + b"]}" if fmt == "anthropic"
                     else b"[" + bad + b"]")
    proc = _refold(tmp_path / "home", "import", str(path), "--format", fmt)
    err = proc.stderr.decode()
    assert proc.returncode == 0, err
    assert err.count("replaced 1 invalid UTF-8 sequence(s)") == 1, err
    assert err.startswith(f"warning: {path}: replaced 1 invalid UTF-8"), err


def test_a_refused_binary_file_warns_before_its_error(tmp_path: Path) -> None:
    path = tmp_path / "blob.dat"
    path.write_bytes(bytes(range(128, 256)) * 4)
    proc = _refold(tmp_path / "home", "import", str(path))
    lines = proc.stderr.decode().splitlines()
    assert proc.returncode == 2, lines
    assert [line.split(":")[0] for line in lines] == ["warning", "error"], lines
    assert "invalid UTF-8" in lines[0] and "not valid JSON" in lines[1], lines


def test_the_import_size_cap_is_configurable(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    line = json.dumps({"role": "user", "content": "x" * 1000}) + "\n"
    path.write_text(line * 50)
    home = tmp_path / "home"
    _refused(_refold(home, "import", str(path), env={"REFOLD_IMPORT_MAX_BYTES": "10000"}),
             "over the import limit of 10,000 bytes")
    # a stream is read only up to one byte over the cap: its size is not known, never said
    for extra in ([], ["--format", "claude-code"]):
        _refused(_refold(home, "import", "-", *extra, stdin=path.read_bytes(),
                         env={"REFOLD_IMPORT_MAX_BYTES": "10000"}),
                 "<stdin> is more than the import limit of 10,000 bytes")
    home.mkdir(exist_ok=True)
    (home / "refold.toml").write_text("import_max_bytes = 100000\n")
    proc = _refold(home, "import", str(path), "--json")
    assert proc.returncode == 0, proc.stderr.decode()
    assert json.loads(proc.stdout)["appended"] == 50


def test_a_pipe_is_read_once(tmp_path: Path) -> None:
    """`refold import <(jq …)` and a named FIFO: the format sniffing read the pipe and the
    import then found it empty ("63: no messages (the input is empty)"); a FIFO waited for
    ever for a second writer. The pipe is read once and imported."""
    import os
    import threading

    sample = Path(__file__).resolve().parents[2] / "src/refold/data/sample_session.jsonl"
    fifo = tmp_path / "transcript"
    os.mkfifo(fifo)

    def feed() -> None:
        with fifo.open("wb") as out:
            out.write(sample.read_bytes())

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    proc = _refold(tmp_path / "home", "import", str(fifo), "--json")
    writer.join(5)
    assert proc.returncode == 0, proc.stderr.decode()
    report = json.loads(proc.stdout)
    assert report["appended"] == 36 and report["title"] == "transcript"
    read, write = os.pipe()  # what <(…) gives: /dev/fd/N
    os.write(write, sample.read_bytes()[:4000].rsplit(b"\n", 1)[0] + b"\n")
    os.close(write)
    try:
        piped = subprocess.run([sys.executable, "-m", "refold.cli.main", "import",
                                f"/dev/fd/{read}", "--json", "--session", "piped"],
                               capture_output=True, timeout=60, pass_fds=(read,),
                               env={**os.environ, "REFOLD_HOME": str(tmp_path / "home")})
    finally:
        os.close(read)
    assert piped.returncode == 0, piped.stderr.decode()
    assert json.loads(piped.stdout)["appended"] > 0
