"""The scripted agent session ``refold demo`` replays: a coding agent on a small billing project.

Two user goals: (1) the test suite broke after a Python 3.12 upgrade — find and fix each failure;
(2) add a CSV export for invoices, asked and answered in Chinese. Along the way the user states
preferences ("I prefer pytest -q", "用中文回答") that the agent saves with the ``memory`` tool,
and the agent keeps a plan with ``todo``. Tool outputs are large (test logs, file listings,
source files, diffs) so a small context window fills quickly and compaction runs several times.

The script is generated deterministically (no randomness, no I/O): the same script every run, so
the demo's figures are reproducible. ``build_script()`` returns the turns; each ``Step`` is one
model reply, and each tool call carries its scripted output (``None`` for tools refold runs for
real: memory, todo, session_search).
"""

from __future__ import annotations

import json
from typing import Any

from refold._records import dataclass, field

PROJECT = "acme-billing"


@dataclass(frozen=True)
class Call:
    name: str
    args: dict[str, Any]
    output: str | None = None  # None: a real refold tool answers


@dataclass(frozen=True)
class Step:
    content: str | None = None
    calls: tuple[Call, ...] = ()


@dataclass(frozen=True)
class Turn:
    phase: str
    label: str
    user: str
    steps: tuple[Step, ...] = field(default_factory=tuple)


# -- the fake project --------------------------------------------------------------------------

MODULES = ["invoice", "tax", "currency", "dates", "db", "config", "version", "customers",
           "payments", "discounts", "reports", "notifications"]

# (module, test file, the failing tests, the error text, the fix as (old, new) lines)
FAILURES = [
    ("dates", "tests/test_dates.py", ["test_due_date_utc", "test_period_end", "test_overdue"],
     "DeprecationWarning: datetime.datetime.utcnow() is deprecated and scheduled for removal "
     "in a future version. Use timezone-aware objects to represent datetimes in UTC: "
     "datetime.datetime.now(datetime.UTC).",
     ("    now = datetime.utcnow()", "    now = datetime.now(timezone.utc)")),
    ("version", "tests/test_version.py", ["test_compare_versions", "test_min_supported"],
     "ModuleNotFoundError: No module named 'distutils'",
     ("from distutils.version import LooseVersion", "from packaging.version import Version")),
    ("customers", "tests/test_legacy_customers.py",
     ["test_merge_duplicates", "test_vat_id_format", "test_archive"],
     "AttributeError: 'CustomerTests' object has no attribute 'assertEquals'. "
     "Did you mean: 'assertEqual'?",
     ("        self.assertEquals(merged.id, 'C-1042')", "        self.assertEqual(merged.id, 'C-1042')")),
    ("config", "tests/test_config.py", ["test_load_plugin", "test_reload"],
     "ModuleNotFoundError: No module named 'imp'",
     ("import imp", "import importlib.util")),
    ("db", "tests/test_db.py", ["test_store_invoice_timestamp", "test_roundtrip_dates"],
     "DeprecationWarning: The default datetime adapter is deprecated as of Python 3.12; see "
     "the sqlite3 documentation for suggested replacement recipes",
     ("    conn = sqlite3.connect(path)",
      "    sqlite3.register_adapter(datetime, adapt_datetime_iso)\n"
      "    conn = sqlite3.connect(path)")),
    ("tax", "tests/test_tax.py", ["test_vat_rounding_eu", "test_reverse_charge"],
     "AssertionError: assert Decimal('19.99') == Decimal('20.00')",
     ("    return amount * rate", "    return (amount * rate).quantize(CENT, ROUND_HALF_UP)")),
    ("payments", "tests/test_payments.py", ["test_retry_backoff", "test_webhook_signature"],
     "TypeError: unsupported operand type(s) for +: 'NoneType' and 'int' "
     "(RETRY_BASE_SECONDS is None since config moved to pyproject.toml)",
     ("RETRY_BASE_SECONDS = settings.get('retry_base')",
      "RETRY_BASE_SECONDS = settings.get('retry_base', 2)")),
    ("discounts", "tests/test_discounts.py", ["test_stacked_discounts", "test_coupon_expiry"],
     "AssertionError: assert Decimal('-0.00') == Decimal('0.00')",
     ("    return max(total - discount, 0)", "    return max(total - discount, Decimal('0.00'))")),
    ("notifications", "tests/test_notifications.py", ["test_smtp_tls", "test_reminder_email"],
     "AttributeError: module 'smtplib' has no attribute 'SMTP_SSL_CONTEXT' "
     "(keyfile/certfile arguments were removed in Python 3.12)",
     ("    server = smtplib.SMTP_SSL(host, keyfile=KEY, certfile=CERT)",
      "    server = smtplib.SMTP_SSL(host, context=ssl_context())")),
    ("reports", "tests/test_reports.py", ["test_month_boundaries", "test_quarter_totals"],
     "ValueError: day is out of range for month (report for 2026-02 used day=30)",
     ("    end = start.replace(day=30)", "    end = start.replace(day=calendar.monthrange(start.year, start.month)[1])")),
    ("currency", "tests/test_currency.py", ["test_eur_usd_rate_cache", "test_unknown_currency"],
     "KeyError: 'CNY' (rates.json lacks CNY; the fallback table was removed in v2.3.0)",
     ("    return RATES[code]", "    return RATES.get(code) or fetch_rate(code)")),
    ("invoice", "tests/test_invoice.py", ["test_invoice_number_sequence", "test_credit_note"],
     "sqlite3.IntegrityError: UNIQUE constraint failed: invoices.number",
     ("    number = f'INV-{count}'", "    number = f'INV-{count + 1:06d}'")),
]


def _source(module: str, lines: int = 90) -> str:
    """A plausible Python module of about ``lines`` lines."""
    out = [f'"""acme_billing.{module}: {module} handling for invoices."""', "",
           "from __future__ import annotations", "", "import logging",
           "from dataclasses import dataclass",
           "from datetime import datetime, timedelta, timezone",
           "from decimal import ROUND_HALF_UP, Decimal", "",
           "log = logging.getLogger(__name__)", "CENT = Decimal('0.01')", ""]
    n = 0
    while len(out) < lines:
        n += 1
        out += [f"def {module}_rule_{n}(invoice: dict, amount: Decimal) -> Decimal:",
                f'    """Apply {module} rule {n} (see docs/{module}.md#{n})."""',
                "    if invoice.get('status') == 'void':",
                "        return Decimal(0)",
                f"    factor = Decimal('{1 + n / 100:.2f}')",
                f"    log.debug('{module} rule {n}: %s', invoice.get('id'))",
                "    return (amount * factor).quantize(CENT, ROUND_HALF_UP)", ""]
    return "\n".join(out[:lines])


def _listing() -> str:
    rows = ["src/acme_billing/__init__.py"]
    for m in MODULES:
        rows.append(f"src/acme_billing/{m}.py")
    for sub in ("export", "templates", "migrations"):
        for i in range(1, 9):
            rows.append(f"src/acme_billing/{sub}/{sub}_{i:02d}.py")
    for m in MODULES:
        rows.append(f"tests/test_{m}.py")
    rows += ["tests/test_legacy_customers.py", "tests/conftest.py", "pyproject.toml",
             "README.md", "docs/architecture.md", "docs/tax.md", "docs/dates.md"]
    return "\n".join(f"{(i * 37) % 900 + 120:>6}  {r}" for i, r in enumerate(rows))


def _pytest_log(failing: list[tuple[str, str, str]], passed: int) -> str:
    """A ``pytest -q`` log with tracebacks for ``failing`` = [(file, test, error)]."""
    dots = "." * 60
    lines = [dots, dots[:40] + "F" * len(failing) + dots[:12], ""]
    if failing:
        lines.append("=" * 30 + " FAILURES " + "=" * 30)
    for path, test, error in failing:
        lines += [f"{'_' * 20} {test} {'_' * 20}", "",
                  "    def " + test + "(invoice_factory, frozen_clock):",
                  "        invoice = invoice_factory(total=Decimal('199.90'), currency='EUR')",
                  ">       result = compute(invoice)", "",
                  f"{path}:{(len(test) * 7) % 80 + 12}: ",
                  "_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _",
                  "src/acme_billing/core.py:88: in compute",
                  "    return pipeline.run(invoice)",
                  f"E   {error}", ""]
    lines.append("=" * 28 + " short test summary info " + "=" * 28)
    for path, test, error in failing:
        lines.append(f"FAILED {path}::{test} - {error[:90]}")
    summary = f"{len(failing)} failed, {passed} passed" if failing else f"{passed} passed"
    lines.append(f"{summary}, 3 warnings in {4.2 + len(failing) * 0.3:.2f}s")
    return "\n".join(lines)


def _diff(path: str, old: str, new: str, context: int = 6) -> str:
    body = [f"--- a/{path}", f"+++ b/{path}", "@@ -40,13 +40,13 @@"]
    body += [f"     # context line {i}: unchanged helper code" for i in range(context)]
    body += [f"-{line}" for line in old.split("\n")]
    body += [f"+{line}" for line in new.split("\n")]
    body += [f"     # context line {i}: unchanged helper code" for i in range(context, 2 * context)]
    return "\n".join(body)


# -- the conversation ---------------------------------------------------------------------------

_ids = iter(range(1, 10_000))


def _tc(name: str, output: str | None = None, **args: Any) -> Call:
    return Call(name, args, output)


def _goal_one() -> list[Turn]:
    all_failing = [(path, test, err) for _, path, tests, err, _ in FAILURES for test in tests]
    turns = [Turn("goal 1", "kick-off", (
        f"Hi! I'm working on {PROJECT}. After upgrading to Python 3.12 the test suite fails. "
        "Can you fix it? Please keep diffs minimal. I prefer pytest -q over verbose output."), (
        Step("Noted — I'll save your preferences first.", (
            _tc("memory", action="add", target="user",
                content="Prefers `pytest -q` (quiet) output; wants minimal diffs."),)),
        Step("Let me plan this out.", (_tc("todo", todos=[
            {"id": "1", "content": "Reproduce the failures with pytest -q", "status": "in_progress"},
            {"id": "2", "content": "Fix each Python 3.12 incompatibility", "status": "pending"},
            {"id": "3", "content": "Full green run", "status": "pending"}]),)),
        Step(None, (_tc("terminal", _listing(), cmd="git ls-files | xargs wc -l"),)),
        Step(None, (_tc("terminal", _pytest_log(all_failing, 187), cmd="pytest -q"),)),
        Step(f"{len(all_failing)} tests fail across {len(FAILURES)} files. They all trace back to "
             "Python 3.12 removals and deprecations (utcnow, distutils, assertEquals, imp, the "
             "sqlite3 datetime adapter) plus two real bugs in tax rounding and payment retries. "
             "I'll fix them one file at a time."),
    ))]
    for module, path, tests, error, (old, new) in FAILURES:
        turns.append(_fix_turn(module, path, tests, error, old, new))
    turns.append(Turn("goal 1", "full run", "Great. Run the whole suite again please.", (
        Step(None, (_tc("terminal", _pytest_log([], 204), cmd="pytest -q"),)),
        Step(None, (_tc("todo", todos=[{"id": "2", "status": "completed"},
                                      {"id": "3", "status": "completed"}], merge=True),)),
        Step("All 204 tests pass with `pytest -q`. Summary of changes: timezone-aware "
             "`datetime.now(timezone.utc)` in dates.py, `packaging.version.Version` instead of "
             "distutils, `assertEqual`, `importlib.util` instead of `imp`, an explicit sqlite3 "
             "datetime adapter, Decimal quantize with ROUND_HALF_UP for VAT, and a default "
             "retry base of 2 s for payments."),
    )))
    turns.append(Turn("goal 1", "lesson", (
        "Thanks! Remember for the future: our CI runs with -W error, so deprecation warnings "
        "are failures here."), (
        Step("Saved.", (_tc("memory", action="add", target="memory",
                            content=f"{PROJECT}: CI runs pytest with -W error — deprecation "
                                    "warnings fail the build."),)),
        Step("Got it — I'll treat deprecation warnings as errors in this project."),
    )))
    return turns


def _fix_turn(module: str, path: str, tests: list[str], error: str, old: str,
              new: str) -> Turn:
    src = f"src/acme_billing/{module}.py"
    failing = [(path, t, error) for t in tests]
    return Turn("goal 1", f"fix {path.rsplit('/', 1)[-1]}", f"Next: {path}.", (
        Step(None, (_tc("read_file", _source(module, 120), path=src),
                    _tc("terminal", _pytest_log(failing, 10), cmd=f"pytest -q {path}"))),
        Step(None, (_tc("read_file", _source("test_" + module, 70), path=path),)),
        Step(None, (_tc("terminal", f"{src}:41:{old.strip()}\n{path}:12:from acme_billing "
                                    f"import {module}", cmd=f"grep -n '{old.split()[0]}' -r src "
                                                            "tests"),)),
        Step(f"The cause is `{old.strip()[:60]}` — {error[:80]}. Minimal fix:", (
            _tc("apply_patch", _diff(src, old, new) + "\nPatch applied: 1 file changed.",
                path=src, patch=_diff(src, old, new)),)),
        Step(None, (_tc("terminal", _pytest_log([], 10 + len(tests)), cmd=f"pytest -q {path}"),)),
        Step(None, (_tc("terminal", _diff(src, old, new, context=3) +
                        f"\n 1 file changed, {new.count(chr(10)) + 1} insertions(+), "
                        f"{old.count(chr(10)) + 1} deletions(-)", cmd="git diff --stat -p"),)),
        Step(f"{path} passes now ({len(tests)} tests fixed)."),
    ))


CSV_COLUMNS = ["invoice_id", "customer", "issued_at", "due_at", "currency", "net", "vat",
               "total", "status"]


def _goal_two() -> list[Turn]:
    turns = [Turn("goal 2", "中文：新需求", (
        "接下来请用中文回答。我们需要给发票加一个导出 CSV 的功能：按月份导出，列包括发票号、客户、"
        "开票日期、到期日、币种、净额、增值税、总额和状态。金额保留两位小数。"), (
        Step("好的，我会用中文回答，并记下这个偏好。", (
            _tc("memory", action="add", target="user", content="用中文回答（用户偏好中文交流）。"),)),
        Step("先规划一下。", (_tc("todo", todos=[
            {"id": "4", "content": "设计 CSV 导出接口 export_invoices_csv(month)", "status": "in_progress"},
            {"id": "5", "content": "实现导出并处理金额格式", "status": "pending"},
            {"id": "6", "content": "补充测试 tests/test_export_csv.py", "status": "pending"},
            {"id": "7", "content": "命令行入口 acme export --month", "status": "pending"}],
            merge=True),)),
        Step(None, (_tc("read_file", _source("reports", 120), path="src/acme_billing/reports.py"),
                    _tc("read_file", _source("invoice", 110), path="src/acme_billing/invoice.py"))),
        Step("现有的 reports.py 已经有按月份筛选发票的 `invoices_for_month()`，可以复用。"
             "我打算在 src/acme_billing/export/csv_export.py 里新增 `export_invoices_csv(month, "
             "out)`，使用标准库 csv 模块，金额用 Decimal.quantize 保留两位小数。"),
    ))]
    parts = [
        ("实现导出函数", "src/acme_billing/export/csv_export.py",
         "def export_invoices_csv(month, out):\n    writer = csv.writer(out)\n"
         "    writer.writerow(CSV_COLUMNS)\n    for inv in invoices_for_month(month):\n"
         "        writer.writerow(row_for(inv))"),
        ("金额格式", "src/acme_billing/export/csv_export.py",
         "def money(value: Decimal) -> str:\n    return str(value.quantize(CENT, ROUND_HALF_UP))"),
        ("时区处理", "src/acme_billing/export/csv_export.py",
         "def iso_day(ts: datetime) -> str:\n    return ts.astimezone(timezone.utc).date().isoformat()"),
        ("测试", "tests/test_export_csv.py",
         "def test_export_month(tmp_path, invoice_factory):\n"
         "    invoice_factory(issued_at='2026-03-14', total=Decimal('119.00'))\n"
         "    assert export_to_text('2026-03').splitlines()[1].endswith(',119.00,paid')"),
        ("空月份处理", "src/acme_billing/export/csv_export.py",
         "    if not invoices:\n        writer.writerow([])  # header only for an empty month"),
        ("大文件流式写出", "src/acme_billing/export/csv_export.py",
         "    for batch in iter_batches(query, size=500):\n        writer.writerows(map(row_for, batch))"),
        ("客户名转义", "tests/test_export_csv.py",
         "def test_customer_with_comma():\n    assert '\"Müller, Schmidt & Co\"' in export_to_text('2026-03')"),
        ("命令行入口", "src/acme_billing/cli.py",
         "@cli.command()\n@click.option('--month', required=True)\n"
         "def export(month):\n    export_invoices_csv(month, sys.stdout)"),
    ]
    for i, (label, path, code) in enumerate(parts):
        turns.append(_feature_turn(i, label, path, code))
    turns.append(Turn("goal 2", "中文：验收", "跑一下全部测试，然后导出 2026 年 3 月的样例给我看看。", (
        Step(None, (_tc("terminal", _pytest_log([], 213), cmd="pytest -q"),
                    _tc("terminal", _csv_sample(), cmd="acme export --month 2026-03"))),
        Step(None, (_tc("todo", todos=[{"id": k, "status": "completed"}
                                      for k in ("4", "5", "6", "7")], merge=True),)),
        Step("全部 213 个测试通过（pytest -q）。CSV 导出已完成：`acme export --month 2026-03` "
             "输出包含发票号、客户、开票日期、到期日、币种、净额、增值税、总额和状态九列，金额保留两位"
             "小数，日期统一为 UTC。新增文件 src/acme_billing/export/csv_export.py 和 "
             "tests/test_export_csv.py。"),
    )))
    turns.append(Turn("goal 2", "recall", (
        "Quick one in English: which port does the staging database use? We set it up in an "
        "earlier session."), (
        Step(None, (_tc("session_search", query="staging database port"),)),
        Step("Port 5433 — from the earlier session \"acme-billing: staging setup\": the staging "
             "database is PostgreSQL 16 on staging-db.internal:5433 (the default 5432 is taken "
             "by the legacy reporting DB)."),
    )))
    return turns


def _feature_turn(i: int, label: str, path: str, code: str) -> Turn:
    test_log = _pytest_log([("tests/test_export_csv.py", f"test_export_case_{i}",
                             "AssertionError: assert '119.0' == '119.00'")], 5) if i == 1 \
        else _pytest_log([], 6 + i)
    return Turn("goal 2", f"中文：{label}", f"继续：{label}。", (
        Step(None, (_tc("read_file", _source("export", 100), path=path),)),
        Step(f"开始{label}。", (_tc("apply_patch", _diff(path, "# TODO", code) +
                                    "\nPatch applied: 1 file changed.", path=path,
                                    patch=_diff(path, "# TODO", code)),)),
        Step(None, (_tc("terminal", test_log, cmd="pytest -q tests/test_export_csv.py"),)),
        Step(None, (_tc("terminal", f" M {path}\n?? tests/fixtures/export_2026_03.csv",
                        cmd="git status --short"),)),
        Step(f"{label}完成。" + ("发现金额少了一位小数，已改用 quantize 修正。" if i == 1 else "测试通过。")),
    ))


def _csv_sample() -> str:
    rows = [",".join(CSV_COLUMNS)]
    for n in range(1, 41):
        net = 100 + n * 7.5
        rows.append(f"INV-2026-03-{n:04d},客户{n:02d} GmbH,2026-03-{(n % 28) + 1:02d},"
                    f"2026-04-{(n % 28) + 1:02d},EUR,{net:.2f},{net * 0.19:.2f},"
                    f"{net * 1.19:.2f},{'paid' if n % 3 else 'open'}")
    return "\n".join(rows)


EARLIER_TITLE = "acme-billing: staging setup"


def earlier_session() -> list[dict[str, Any]]:
    """A short earlier session the demo stores first, so ``session_search`` has history to find
    (the current session's own rows never come back as history)."""
    return [
        {"role": "user", "content": "Set up a staging database for acme-billing, please."},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "early_1", "type": "function", "function": {
                "name": "terminal", "arguments": json.dumps(
                    {"cmd": "docker run -d --name staging-db -p 5433:5432 postgres:16"})}}]},
        {"role": "tool", "tool_call_id": "early_1", "content": "3f9c2a1b7d4e"},
        {"role": "assistant", "content": (
            "The staging database runs PostgreSQL 16 on staging-db.internal, port 5433 — the "
            "default port 5432 is taken by the legacy reporting DB.")},
        {"role": "user", "content": "Thanks. Use it for the integration tests."},
        {"role": "assistant", "content": (
            "Done: tests/integration/conftest.py now reads STAGING_DATABASE_URL="
            "postgresql://staging-db.internal:5433/acme.")},
    ]


def build_script() -> list[Turn]:
    """The whole demo conversation, in order."""
    return _goal_one() + _goal_two()


def call_payload(call: Call, call_id: str) -> dict[str, Any]:
    """The wire ``tool_calls`` entry for ``call``."""
    return {"id": call_id, "type": "function",
            "function": {"name": call.name, "arguments": json.dumps(call.args, ensure_ascii=False)}}


# Schemas for the tools the scripted agent "runs" (their output comes from the script).
FAKE_TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "terminal", "description": "Run a shell command in the project directory.",
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}},
                       "required": ["cmd"]}}},
    {"type": "function", "function": {
        "name": "read_file", "description": "Read a file of the project.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                       "required": ["path"]}}},
    {"type": "function", "function": {
        "name": "apply_patch", "description": "Apply a unified diff to a file.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string"}, "patch": {"type": "string"}},
            "required": ["path", "patch"]}}},
]
