"""``--ember-report=FILE``: the op x dtype coverage table, as Markdown or JSON.

Each conformance test item carries ``ember_op``, ``ember_dtype``, ``ember_case`` and
``ember_family`` in its ``user_properties`` (set at collection), so the table can be built from
test reports alone, including reports that pytest-xdist workers send back.
"""

from __future__ import annotations

import datetime
import json
import platform
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

__all__ = ["CoverageReport", "DTYPE_COLUMNS", "fusion_note"]

DTYPE_COLUMNS = (
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "-",
)


def fusion_note() -> str:
    """What the suite does about kernel fusion, for the report header."""
    return "no backend fuses kernels yet (the lazy/fusion layer is issue 10); every op ran unfused"


def _reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if report.skipped:
        if isinstance(longrepr, tuple) and len(longrepr) == 3:
            text = str(longrepr[2])
        else:
            text = str(longrepr)
        text = text.removeprefix("Skipped: ").strip()
        return text or "(no reason given)"
    crash = getattr(longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(longrepr)
    return text.strip().splitlines()[0] if text.strip() else "(no message)"


class CoverageReport:
    """Collects one record per conformance test and writes the table at the end of the session."""

    def __init__(self, path: str, device: str) -> None:
        self.path = Path(path)
        self.device = device
        self.records: dict[str, dict[str, Any]] = {}

    # -- pytest hooks -----------------------------------------------------------------------
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        props = dict(report.user_properties)
        if "ember_family" not in props:
            return
        if report.when == "call" or (report.when == "setup" and not report.passed):
            outcome = "pass" if report.passed else "skip" if report.skipped else "fail"
        elif report.when == "teardown" and report.failed:
            outcome = "fail"
        else:
            return
        record = {
            "id": report.nodeid,
            "family": props["ember_family"],
            "op": props.get("ember_op", "-"),
            "dtype": props.get("ember_dtype", "-"),
            "case": props.get("ember_case", "-"),
            "outcome": outcome,
            "reason": "" if outcome == "pass" else _reason(report),
        }
        previous = self.records.get(report.nodeid)
        if previous is None or previous["outcome"] == "pass":
            self.records[report.nodeid] = record

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if not self.records:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.suffix == ".json":
            self.path.write_text(json.dumps(self.as_json(), indent=1), encoding="utf-8")
        else:
            self.path.write_text(self.as_markdown(), encoding="utf-8")

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.records:
            terminalreporter.write_line(f"ember conformance report written to {self.path}")

    # -- building -----------------------------------------------------------------------------
    def _summary(self) -> dict[str, int]:
        counts = Counter(r["outcome"] for r in self.records.values())
        return {"cases": len(self.records), "pass": counts["pass"], "skip": counts["skip"], "fail": counts["fail"]}

    def _table(self) -> dict[str, dict[str, Counter[str]]]:
        table: dict[str, dict[str, Counter[str]]] = defaultdict(lambda: defaultdict(Counter))
        for r in self.records.values():
            table[r["op"]][r["dtype"]][r["outcome"]] += 1
        return table

    def _header(self) -> dict[str, str]:
        import numpy

        import ember

        return {
            "device": self.device,
            "ember": ember.__version__,
            "numpy": numpy.__version__,
            "python": platform.python_version(),
            "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "fusion": fusion_note(),
        }

    def as_json(self) -> dict[str, Any]:
        table = {op: {dt: dict(c) for dt, c in row.items()} for op, row in sorted(self._table().items())}
        return {
            **self._header(),
            "summary": self._summary(),
            "table": table,
            "cases": sorted(self.records.values(), key=lambda r: r["id"]),
        }

    def as_markdown(self) -> str:
        head = self._header()
        s = self._summary()
        lines = [
            f"# ember conformance report: {head['device']}",
            "",
            f"ember {head['ember']}, numpy {head['numpy']}, Python {head['python']}, {head['date']}.",
            f"Fusion: {head['fusion']}",
            "",
            f"**{s['cases']} cases: {s['pass']} passed, {s['skip']} skipped, {s['fail']} failed.**",
            "",
            "## Op x dtype",
            "",
            "Each cell: cases passed, then `s` skipped and `F` failed; a blank cell means the op does not take "
            "that dtype. `-` collects tests that are not about one dtype.",
            "",
        ]
        table = self._table()
        used = [c for c in DTYPE_COLUMNS if any(c in row for row in table.values())]
        used += sorted({dt for row in table.values() for dt in row} - set(used))
        lines.append("| op | " + " | ".join(used) + " |")
        lines.append("|---|" + "---|" * len(used))
        for op in sorted(table):
            cells = []
            for dt in used:
                c = table[op].get(dt)
                if not c:
                    cells.append("")
                    continue
                parts = [str(c["pass"])] if c["pass"] else []
                if c["skip"]:
                    parts.append(f"{c['skip']}s")
                if c["fail"]:
                    parts.append(f"**{c['fail']}F**")
                cells.append(" ".join(parts))
            lines.append(f"| {op} | " + " | ".join(cells) + " |")
        families = Counter(r["family"] for r in self.records.values())
        lines += ["", "## Tests by family", "", "| family | cases |", "|---|---|"]
        lines += [f"| {f} | {n} |" for f, n in sorted(families.items())]
        skips: dict[str, list[str]] = defaultdict(list)
        for r in self.records.values():
            if r["outcome"] == "skip":
                skips[r["reason"]].append(r["id"])
        lines += ["", "## Skipped, by reason", ""]
        if not skips:
            lines.append("Nothing was skipped.")
        for reason, ids in sorted(skips.items(), key=lambda kv: -len(kv[1])):
            lines.append(f"- **{len(ids)}** — {reason}")
            lines += [f"  - `{i}`" for i in sorted(ids)[:5]]
            if len(ids) > 5:
                lines.append(f"  - ... and {len(ids) - 5} more")
        fails = [r for r in self.records.values() if r["outcome"] == "fail"]
        lines += ["", "## Failures", ""]
        if not fails:
            lines.append("None.")
        lines += [f"- `{r['id']}`: {r['reason']}" for r in sorted(fails, key=lambda r: r["id"])]
        return "\n".join(lines) + "\n"
