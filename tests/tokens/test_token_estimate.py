"""The estimate against the exact vocabularies, calibration, and model selection."""

from __future__ import annotations

import pytest

from refold.tokens import (
    Calibration,
    chars_per_four,
    encoding_for_model,
    estimate_tokens,
    get_counter,
    load_encoding,
)

EN = """The quick brown fox jumps over the lazy dog. In software engineering, a context window is the
maximum number of tokens a language model can consider at once. When a conversation grows beyond
that limit, older turns must be summarized or dropped. This document explains how refold keeps the
window fit while never deleting history: every message is appended to a ledger, and compaction
adds a checkpoint that replaces the middle of the conversation with a structured summary. The
system prompt is never summarized, and the most recent messages survive verbatim."""
ZH = """上下文压缩是智能体的核心特性之一，用于在对话历史超过模型上下文窗口限制时，自动压缩中间轮次，保留关键信息的同时释放上下文空间。
当提示词的令牌数超过阈值时，系统启动一个五阶段流水线：裁剪旧工具结果，保护头尾消息，然后用大语言模型总结中间部分。
摘要会写回消息列表，替换原来的中间段。系统提示永远不会被压缩，最近的用户消息和助手消息会原样保留。
为了防止反复无效的压缩，连续两次压缩无效之后会阻断自动压缩，并在三百秒后允许一次试探性压缩。"""
JA = """コンテキスト圧縮は、会話の履歴がモデルのコンテキストウィンドウの上限を超えたときに、中間のターンを自動的に要約する機能です。
システムプロンプトは決して要約されず、最新のユーザーメッセージとアシスタントメッセージはそのまま保持されます。
ファイルパスやエラーメッセージなどの正確な識別子は、アンカーインデックスにそのまま保存されます。"""
CODE = '''def _find_tail_cut(messages: list[dict], head_end: int, budget: int) -> int:
    """Walk backward from the end, accumulating tokens until the budget is reached."""
    accumulated = 0
    cut = len(messages)
    for i in range(len(messages) - 1, head_end - 1, -1):
        tokens = len(messages[i].get("content") or "") // 4 + 10
        if accumulated + tokens > budget * 1.5 and len(messages) - i >= 3:
            break
        accumulated += tokens
        cut = i
    return align_backward(messages, cut)
    x = {"key": [1, 2, 3], 'other': None, "path": "/usr/local/lib/python3.11/site-packages"}
'''
SAMPLES = {"english": EN, "chinese": ZH, "japanese": JA, "code": CODE}


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base", "qwen3", "llama3"])
@pytest.mark.parametrize("sample", sorted(SAMPLES))
def test_estimate_within_35_percent_where_chars_over_4_is_not(encoding: str, sample: str) -> None:
    text = SAMPLES[sample]
    exact = load_encoding(encoding).count(text)
    err = estimate_tokens(text) / exact - 1
    # the vocabularies themselves spread 0.63-1.07 tokens per CJK character
    assert abs(err) <= 0.35, (encoding, sample, err)
    if sample in ("chinese", "japanese"):
        # the naive estimate undercounts CJK by well over half; ours must not
        assert chars_per_four(text) / exact - 1 < -0.55


def test_estimate_basics() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("a") == 1
    assert estimate_tokens("中文" * 100) > estimate_tokens("ab" * 100)


@pytest.mark.parametrize(("model", "encoding"), [
    ("gpt-4o", "o200k_base"), ("gpt-4o-mini", "o200k_base"), ("openai/gpt-4.1-mini", "o200k_base"),
    ("o1-preview", "o200k_base"), ("o3", "o200k_base"), ("gpt-5", "o200k_base"),
    ("gpt-4", "cl100k_base"), ("gpt-4-turbo", "cl100k_base"), ("gpt-3.5-turbo", "cl100k_base"),
    ("Qwen/Qwen3-32B", "qwen3"), ("qwen2.5-coder", "qwen3"),
    ("meta-llama/Llama-3.1-8B-Instruct", "llama3"), ("llama3:8b", "llama3"),
    ("claude-sonnet-4", None), ("deepseek-chat", None), ("", None), ("gemini-pro", None),
    ("gpt-oss-20b", "o200k_harmony"), ("hello-o1world", None),
])
def test_encoding_for_model(model: str, encoding: str | None) -> None:
    assert encoding_for_model(model) == encoding


def test_get_counter_exact_and_estimate() -> None:
    exact = get_counter("gpt-4o")
    assert exact.exact and exact.name == "o200k_base"
    est = get_counter("claude-3-opus", calibration=Calibration())
    assert not est.exact and "estimate" in est.name
    forced = get_counter("gpt-4o", exact=False)
    assert not forced.exact


def test_calibration_learns_per_model_and_is_smoothed() -> None:
    cal = Calibration(smoothing=0.5)
    counter = get_counter("claude-x", calibration=cal)
    msgs = [{"role": "user", "content": SAMPLES["english"]}]
    raw = counter.count_messages(msgs)
    state = counter.observe_usage(msgs, raw * 2)
    assert state.samples == 1 and state.ratio == pytest.approx(2.0, rel=0.01)
    assert counter.count_messages(msgs) == pytest.approx(raw * 2, rel=0.01)
    counter.observe_usage(msgs, raw)  # a ratio-1 reading moves it halfway
    assert cal.ratio("claude-x") == pytest.approx(1.5, rel=0.01)
    assert cal.ratio("other-model") == 1.0
    counter.observe_usage(msgs, raw * 100)  # clamped, not 100x
    assert cal.ratio("claude-x") <= 3.0
    assert cal.observe("claude-x", 0, 10).samples == 3  # ignored reading


def test_calibration_does_not_scale_exact_counters() -> None:
    cal = Calibration()
    counter = get_counter("gpt-4o", calibration=cal)
    msgs = [{"role": "user", "content": "hello world"}]
    before = counter.count_messages(msgs)
    counter.observe_usage(msgs, before * 2)
    assert counter.count_messages(msgs) == before


def test_calibrations_stay_bounded_when_clients_send_many_model_names() -> None:
    from refold.tokens.calibration import MAX_MODELS, Calibration

    calibration = Calibration()
    for i in range(MAX_MODELS * 4):
        calibration.observe(f"client-model-{i}", 100, 150)
    calibration.observe("client-model-0", 100, 150)  # seen again: the newest now
    assert len(calibration._states) == MAX_MODELS
    assert "client-model-0" in calibration._states
    assert f"client-model-{MAX_MODELS * 4 - 1}" in calibration._states
    assert "client-model-1" not in calibration._states  # the oldest went
