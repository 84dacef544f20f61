"""What `gpushare check` found, as values, and its two renderings: text for a terminal, JSON for tools.

The messages are the core's own strings (`Finding.__str__`, `Verdict.message()`, warnings); this
module only places them at a file and line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from webhook.cli import manifests
from webhook.core.specs import finding

# Exit codes of `gpushare check`.
CLEAN = 0
VIOLATIONS = 1
UNREADABLE = 2


@dataclass(frozen=True, slots=True)
class Finding:
    """One rule violation at its line; `text` is the core's message for it."""

    line: int
    path: str
    container: str | None
    value: str | None
    problem: str
    fix: str
    text: str


@dataclass(frozen=True, slots=True)
class Addition:
    """What the webhook adds to the pods of one template: the isolation nodeSelector, the schedulerName."""

    line: int
    path: str  # the template's field path ("" for a Pod)
    node_selector: dict[str, str] = field(default_factory=dict)
    scheduler_name: str | None = None


@dataclass(frozen=True, slots=True)
class ObjectResult:
    """One object of a manifest and its verdict."""

    source: str
    line: int
    kind: str
    namespace: str
    name: str
    origin: str | None  # the Helm template it came from, when `helm template` said so
    allowed: bool
    message: str  # `Verdict.message()`: the webhook's denial text, "" when allowed
    findings: tuple[Finding, ...] = ()
    warnings: tuple[str, ...] = ()
    additions: tuple[Addition, ...] = ()

    @property
    def title(self) -> str:
        name = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.kind} {name}"

    def has_news(self) -> bool:
        return bool(self.findings or self.warnings or self.additions or not self.allowed)


@dataclass(frozen=True, slots=True)
class Problem:
    """Input that could not be read or checked (exit 2), or a document skipped (no effect on exit)."""

    source: str
    line: int | None
    problem: str

    def __str__(self) -> str:
        return manifests.located(shown(self.source), self.line or None, self.problem)


@dataclass(slots=True)
class Report:
    """Accumulated while reading; only objects with something to say are kept, the rest are counted."""

    files: int = 0
    objects: int = 0
    results: list[ObjectResult] = field(default_factory=list)
    errors: list[Problem] = field(default_factory=list)
    skipped: list[Problem] = field(default_factory=list)

    @property
    def denied(self) -> int:
        return sum(1 for r in self.results if not r.allowed)

    @property
    def violations(self) -> int:
        return sum(len(r.findings) for r in self.results)

    @property
    def warnings(self) -> int:
        return sum(len(r.warnings) for r in self.results)

    @property
    def exit_code(self) -> int:
        # Unreadable input wins: what it holds was never checked, so "only violations" would be a lie.
        if self.errors:
            return UNREADABLE
        return VIOLATIONS if self.denied else CLEAN


def render_text(report: Report, quiet: bool = False) -> str:
    """file:line prefixes on every finding, so editors and CI logs link straight to it."""
    out: list[str] = []
    for r in report.results:
        if quiet and r.allowed:
            continue
        source = shown(r.source)
        origin = f" (from {shown(r.origin)})" if r.origin else ""
        verdict = "denied" if not r.allowed else "allowed"
        out.append(f"{source}:{r.line}: {r.title}{origin}: {verdict}")
        out.extend(f"  {source}:{f.line}: error: {f.text}" for f in r.findings)
        out.extend(f"  warning: {w}" for w in r.warnings)
        if not quiet:
            for a in r.additions:
                where = a.path or "the pod"
                for key, value in a.node_selector.items():
                    out.append(f'  adds nodeSelector {key}: "{value}" to {where}')
                if a.scheduler_name:
                    out.append(f"  adds schedulerName: {a.scheduler_name} to {where}")
    out.extend(f"error: {e}" for e in report.errors)
    if not quiet:
        out.extend(f"skipped: {s}" for s in report.skipped)
    out.append(summary(report))
    return "\n".join(out) + "\n"


def shown(path: str) -> str:
    """A file name as text output prints it: escaped like object names, so an ESC or a newline in it
    cannot colour the terminal or forge a line of the report. JSON keeps it as it is (JSON escapes it)."""
    return finding.printable(path)


def summary(report: Report) -> str:
    parts = [
        f"{report.objects} object{_s(report.objects)} in {report.files} file{_s(report.files)}",
        f"{report.denied} denied ({report.violations} violation{_s(report.violations)})",
        f"{report.warnings} warning{_s(report.warnings)}",
    ]
    if report.errors:
        parts.append(f"{len(report.errors)} unreadable")
    return "checked " + ", ".join(parts)


def to_json(report: Report) -> dict[str, Any]:
    return {
        "summary": {
            "files": report.files,
            "objects": report.objects,
            "denied": report.denied,
            "violations": report.violations,
            "warnings": report.warnings,
            "errors": len(report.errors),
            "skipped": len(report.skipped),
            "exitCode": report.exit_code,
        },
        "results": [_result_json(r) for r in report.results],
        "errors": [_problem_json(e) for e in report.errors],
        "skipped": [_problem_json(s) for s in report.skipped],
    }


def render_json(report: Report) -> str:
    return json.dumps(to_json(report), indent=2, ensure_ascii=False) + "\n"


def _result_json(r: ObjectResult) -> dict[str, Any]:
    return {
        "file": r.source,
        "line": r.line,
        "origin": r.origin,
        "kind": r.kind,
        "namespace": r.namespace,
        "name": r.name,
        "allowed": r.allowed,
        "message": r.message,
        "violations": [
            {
                "line": f.line,
                "path": f.path,
                "container": f.container,
                "value": f.value,
                "problem": f.problem,
                "fix": f.fix,
                "message": f.text,
            }
            for f in r.findings
        ],
        "warnings": list(r.warnings),
        "additions": [
            {
                "line": a.line,
                "path": a.path,
                "nodeSelector": a.node_selector,
                "schedulerName": a.scheduler_name,
            }
            for a in r.additions
        ],
    }


def _problem_json(p: Problem) -> dict[str, Any]:
    return {"file": p.source, "line": p.line, "problem": p.problem}


def _s(n: int) -> str:
    return "" if n == 1 else "s"
