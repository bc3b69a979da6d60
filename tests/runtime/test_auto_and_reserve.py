"""Issue 14 item 6 leftovers: the auto-compaction switch (``[compaction] enabled`` /
``auto_compact``) and the output reserve taken from a request's ``max_tokens`` — in the library
and in settings (the proxy: tests/server/test_proxy_reserve.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from refold.compaction.policy import CompactionPolicy
from refold.config import load_settings
from refold.runtime import Engine
from refold.store import Store

WINDOW = 20_000  # threshold 15,000 (the 0.75 floor); a reserve of 14,000 lowers it to 6,000


def history(turns: int = 40) -> list[dict[str, Any]]:
    filler = "The build log said: step N compiled module alpha beta gamma delta. " * 12
    out: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    for i in range(turns):
        out += [{"role": "user", "content": f"turn {i}: " + filler.replace("N", str(i))},
                {"role": "assistant", "content": f"noted {i}"}]
    return [*out, {"role": "user", "content": "And now?"}]


def _prepare(store: Store, *, reserve: int | None = None, **policy: Any) -> Any:
    engine = Engine(store, model="gpt-4o", context_length=WINDOW,
                    policy=CompactionPolicy(**policy), background_precompact=False)
    try:
        rt = engine.open_session(new=True)
        rt.output_reserve = reserve
        return rt.prepare_history(history()), rt.ops.threshold
    finally:
        engine.close()


def test_the_history_sits_between_the_reserved_and_the_plain_threshold(store: Store) -> None:
    prepared, threshold = _prepare(store)
    assert prepared.compaction is None
    assert WINDOW - 14_000 < prepared.tokens < threshold, prepared.tokens


def test_a_requests_max_tokens_is_its_output_reserve(store: Store) -> None:
    prepared, _ = _prepare(store, reserve=14_000)
    assert prepared.compaction is not None and prepared.compaction.changed
    assert prepared.tokens + 14_000 <= WINDOW
    small, _ = _prepare(store, reserve=1_000)  # under the policy's 4,096: the policy's stands
    assert small.compaction is None


def test_auto_compaction_off_compacts_nothing_on_its_own(store: Store) -> None:
    engine = Engine(store, model="gpt-4o", context_length=4_000,
                    policy=CompactionPolicy(auto_compact=False), background_precompact=False)
    try:
        rt = engine.open_session(new=True)
        prepared = rt.prepare_history(history())  # far over the 3,000-token threshold
        assert prepared.compaction is None
        assert store.latest_checkpoint(rt.session_id) is None
        assert rt.compact() is not None  # asked for explicitly: it still compacts
        assert store.latest_checkpoint(rt.session_id) is not None
    finally:
        engine.close()


def test_the_switch_is_reachable_from_toml_env_and_set(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "refold.toml").write_text("[compaction]\nenabled = false\n", encoding="utf-8")
    assert load_settings({"home": str(home)}, {}).compaction.auto_compact is False
    (home / "refold.toml").write_text("[compaction]\nauto = false\n", encoding="utf-8")
    assert load_settings({"home": str(home)}, {}).compaction.auto_compact is False
    env = load_settings({"home": str(tmp_path)}, {"REFOLD_AUTO_COMPACT": "false"})
    assert env.compaction.auto_compact is False
    assert env.source_of("auto_compact") == "env REFOLD_AUTO_COMPACT"
    flag = load_settings({"home": str(tmp_path)}, {}, sets=["compaction.enabled=off"])
    assert flag.compaction.auto_compact is False
