"""Cost (issue 14 item 7, the part done): a shipped price table with overrides from
refold.toml, and ``sessions list`` showing tokens and cost (both backends)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from refold.cli.main import cli
from refold.errors import InvalidInput
from refold.pricing import Price, cost_usd, parse_overrides, price_for
from refold.store import Store


def db_url(store: Store) -> str:
    schema = getattr(store, "schema", None)
    if schema is None or "schema=" in store.url:
        return store.url
    return f"{store.url}{'&' if '?' in store.url else '?'}schema={schema}"


def test_price_lookup_exact_then_longest_prefix_and_overrides() -> None:
    assert price_for("gpt-4o-mini") == Price(0.15, 0.60, 0.075)
    assert price_for("gpt-4o-mini-2024-07-18") == price_for("gpt-4o-mini")  # not gpt-4o
    assert price_for("my-local-model") is None and price_for(None) is None
    mine = parse_overrides({"my-local-model": {"input": 1, "output": 2}})
    assert price_for("my-local-model", mine) == Price(1.0, 2.0)
    with pytest.raises(InvalidInput):
        parse_overrides({"m": {"input": 1}})
    with pytest.raises(InvalidInput):
        parse_overrides({"m": {"input": 1, "output": -2}})


def test_cached_input_is_priced_at_the_cache_rate() -> None:
    price = Price(input=2.0, output=8.0, cache_read=0.5)
    # 1M prompt tokens of which 400k cached, 100k output
    assert cost_usd(price, input_tokens=1_000_000, output_tokens=100_000,
                    cache_read_tokens=400_000) == pytest.approx(0.6 * 2 + 0.4 * 0.5 + 0.1 * 8)


def test_sessions_list_shows_tokens_and_cost(store: Store, tmp_path: Path) -> None:
    priced = store.create_session(title="priced", model="gpt-4o")
    store.add_usage(priced.id, input_tokens=200_000, output_tokens=10_000,
                    cache_read_tokens=100_000)
    local = store.create_session(title="local", model="my-local-model")
    store.add_usage(local.id, input_tokens=1_000_000, output_tokens=0)
    home = tmp_path / "home"
    home.mkdir()
    args = ["--home", str(home), "--db", db_url(store), "sessions", "list"]
    rows = {r["title"]: r for r in json.loads(CliRunner().invoke(cli, [*args, "--json"]).output)}
    assert rows["priced"]["estimated_cost_usd"] == pytest.approx(0.1 * 2.5 + 0.1 * 1.25 + 0.1)
    assert rows["local"]["estimated_cost_usd"] is None
    (home / "refold.toml").write_text('[pricing."my-local-model"]\ninput = 0.5\noutput = 1.0\n')
    rows = {r["title"]: r for r in json.loads(CliRunner().invoke(cli, [*args, "--json"]).output)}
    assert rows["local"]["estimated_cost_usd"] == pytest.approx(0.5)
    text = CliRunner().invoke(cli, args).output
    assert "210,000" in text and "$0.4750" in text and "$0.5000" in text


def test_recorded_usage_fills_cost_usd(store: Store, tmp_path: Path) -> None:
    """``cost_usd`` was always 0: a recorded reply's usage is now priced per session."""
    from refold.runtime import Engine

    engine = Engine(store, model="gpt-4o", context_length=128_000)
    rt = engine.open_session(new=True)
    rt.prepare([{"role": "user", "content": "hi"}])
    rt.record({"role": "assistant", "content": "hello"}, model="gpt-4o",
              usage={"prompt_tokens": 100_000, "completion_tokens": 10_000,
                     "prompt_tokens_details": {"cached_tokens": 50_000}})
    rt.prepare([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
                {"role": "user", "content": "again"}])
    rt.record({"role": "assistant", "content": "ok"}, model="unknown-model",
              usage={"prompt_tokens": 1_000, "completion_tokens": 10})
    session = store.get_session(rt.session_id)
    assert session.cost_usd == pytest.approx(0.05 * 2.5 + 0.05 * 1.25 + 0.01 * 10)
    engine.close()


def test_the_table_has_the_checked_prices_and_dated_names_match_by_prefix() -> None:
    """Issue 14 item 7: the shipped figures as checked (see refold.pricing's docstring): the
    DeepSeek V3.2 rates, Haiku 4.5, and dated model names priced by their family."""
    assert price_for("deepseek-chat") == Price(0.28, 0.42, 0.028)
    assert price_for("deepseek-reasoner") == Price(0.28, 0.42, 0.028)
    assert price_for("claude-haiku-4-5-20251001") == Price(1.00, 5.00, 0.10, 1.25)
    assert price_for("claude-sonnet-4-5-20250929") == Price(3.00, 15.00, 0.30, 3.75)
    assert price_for("claude-opus-4-1-20250805") == Price(15.00, 75.00, 1.50, 18.75)


def test_sessions_compact_charges_the_summary_to_the_session(store: Store, tmp_path: Path) -> None:
    """`refold sessions compact` with the llm summarizer: the summary model's usage lands in
    the compacted session's totals, priced by the refold.toml override (both backends)."""
    import sys

    from refold.testing import ScriptedReply, serve

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "compaction"))
    from agent_transcript import agent_transcript

    session = store.create_session(title="Login work", model="gpt-4o")
    store.append_messages(session.id, agent_transcript(40)[1:])
    home = tmp_path / "home"
    home.mkdir()
    (home / "refold.toml").write_text('[pricing."aux"]\ninput = 1.0\noutput = 2.0\n')
    usage = {"prompt_tokens": 30_000, "completion_tokens": 1_000, "total_tokens": 31_000}
    with serve(default=lambda body: ScriptedReply(content="## Goal\n- fix login\n## Progress\n"
                                                  "### Done\n- the login form was read",
                                                  usage=usage)) as up:
        result = CliRunner().invoke(cli, [
            "--home", str(home), "--db", db_url(store), "sessions", "compact", session.id,
            "--context-length", "12000", "--summarizer", "llm", "--json"],
            env={"REFOLD_SUMMARIZER_URL": up.base_url, "REFOLD_SUMMARIZER_MODEL": "aux",
                 "REFOLD_UPSTREAM": None})
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["report"]["summarizer"] == "llm:aux"
    after = store.get_session(session.id)
    assert after.cost_usd == pytest.approx((30_000 * 1.0 + 1_000 * 2.0) / 1e6)
    assert (after.input_tokens, after.output_tokens) == (30_000, 1_000)
    assert after.model == "gpt-4o"


def test_newer_models_have_their_own_prices_and_a_point_release_is_not_its_base() -> None:
    """Opus 4.5 / 4.6 were priced as Opus 4 (3x too much; real Claude Code transcripts use
    claude-opus-4-6); Codex and Gemini CLI sessions had no price. A table name prices a model
    only up to a separator, so a later point release is unknown, never another's price."""
    assert price_for("claude-opus-4-6") == Price(5.00, 25.00, 0.50, 6.25)
    assert price_for("claude-opus-4-5-20251101") == price_for("claude-opus-4-5")
    assert price_for("claude-opus-4-1-20250805") == Price(15.00, 75.00, 1.50, 18.75)
    assert price_for("gpt-5-codex") == price_for("gpt-5") == Price(1.25, 10.00, 0.125)
    assert price_for("gpt-5-mini-2025-08-07") == Price(0.25, 2.00, 0.025)
    assert price_for("gpt-5.2") is None and price_for("gpt-4oo") is None
    assert price_for("gemini-2.5-flash-lite-preview-09-2025") == Price(0.10, 0.40, 0.01)
    assert price_for("gemini-2.5-pro") == Price(1.25, 10.00, 0.125)


def test_one_hour_cache_writes_cost_twice_the_input_price() -> None:
    opus = Price(5.00, 25.00, 0.50, 6.25)
    base = cost_usd(opus, input_tokens=3_000, output_tokens=0, cache_write_tokens=3_000)
    assert base == pytest.approx(3_000 * 6.25 / 1e6)
    mixed = cost_usd(opus, input_tokens=3_000, output_tokens=0, cache_write_tokens=3_000,
                     long_cache_write_tokens=2_000)
    assert mixed == pytest.approx((1_000 * 6.25 + 2_000 * 10.0) / 1e6)
    # never more long writes than writes; a price without a write rate has no such split
    assert cost_usd(opus, input_tokens=10, output_tokens=0, cache_write_tokens=10,
                    long_cache_write_tokens=99) == pytest.approx(10 * 10.0 / 1e6)
    assert cost_usd(Price(1.0, 2.0), input_tokens=10, output_tokens=0, cache_write_tokens=10,
                    long_cache_write_tokens=10) == 0.0
