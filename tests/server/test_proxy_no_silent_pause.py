"""The proxy says every skipped compaction (issue 13 item 5): a no-op and the back-off after
it reach an OpenAI SDK client in ``X-Refold-Warnings``."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

import openai

from refold.testing import serve

# one message over the threshold of a 3,800-token window (2,850) and under 85% of it (3,230),
# where a due compaction held back by the back-off is not yet overridden (past 85% it is:
# ``tests/compaction/test_guard_unstored.py``): nothing to summarize
BIG = "long " * 3000


def test_the_proxy_reports_the_noop_and_the_pause_in_its_header(
        start_one_proxy: Any) -> None:
    with serve(default=lambda _b: "ok") as up:
        proxy = start_one_proxy(up, context_length=3800)
        client = openai.OpenAI(base_url=proxy.base_url, api_key="none", max_retries=0)
        headers = {"X-Refold-Session": "paused"}
        history: list[Any] = [{"role": "user", "content": BIG}]
        seen = []
        for follow_up in ("again", "and again"):
            raw = client.chat.completions.with_raw_response.create(
                model="m", messages=history, extra_headers=headers)
            seen.append([unquote(p) for p in raw.headers["x-refold-warnings"].split("; ")])
            history += [{"role": "assistant", "content": raw.parse().choices[0].message.content},
                        {"role": "user", "content": follow_up}]
    assert any(w.startswith("compaction skipped: ") for w in seen[0]), seen
    assert any("auto-compaction paused for" in w for w in seen[1]), seen
