"""`gpushare check`: the webhook's rules on manifests before they reach a cluster.

Every object goes through `webhook.core.admission.verdict.evaluate`, the call the webhook makes, so the
messages are the webhook's; this module only reads files, places findings at a line and sets the exit code.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from webhook.admission import settings as admission_settings
from webhook.cli import flagtypes, manifests, progname, progress, report
from webhook.core.admission import quotas, verdict
from webhook.core.specs import finding

OUTPUTS = ("text", "json")
# A terminal gets a progress line from this many objects on (Helm output of thousands of documents);
# smaller inputs finish before a line would be worth drawing.
PROGRESS_AFTER = 1000
# metadata.name is a DNS subdomain name: at most 253 characters; longer text is clipped.
_NAME_LIMIT = 253


@dataclass(frozen=True, slots=True)
class CheckSettings:
    paths: tuple[str, ...]
    output: str = "text"
    policy: verdict.Policy = field(default_factory=verdict.Policy)
    # Objects in these namespaces are left alone by the webhook, so check skips them too.
    excluded_namespaces: frozenset[str] = frozenset()
    quiet: bool = False


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=progname.command("check"),
        description=(
            "Check Kubernetes manifests with the admission webhook's GPU rules, offline. "
            "Exit status: 0 clean, 1 violations, 2 unreadable input."
        ),
        epilog="example: helm template ./chart | gpushare check -",
    )
    parser.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="manifest files, directories (searched for .yaml, .yml, .json) or - for stdin",
    )
    parser.add_argument("-o", "--output", choices=OUTPUTS, default="text", help="output format (text)")
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="the webhook's YAML config file: resources, isolation, schedulerName, excludedNamespaces",
    )
    parser.add_argument(
        "--memory-unit",
        type=flagtypes.memory_unit,
        metavar="UNIT",
        help="unit of aliyun.com/gpu-mem, as the extender counts it: GiB (default), MiB or <N>MiB; "
        "messages suggest values in it",
    )
    parser.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="text output: only denied objects, their warnings, and errors",
    )
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = settings_from_args(args)
    except admission_settings.ConfigError as err:
        # The message may hold the --config path: escaped as file names are in the report.
        print(f"gpushare check: {finding.printable(str(err))}", file=sys.stderr)
        return report.UNREADABLE
    return run(settings)


def settings_from_args(args: argparse.Namespace) -> CheckSettings:
    policy, excluded = admission_settings.rules_from_file(args.config)
    if args.memory_unit is not None:
        policy = dataclasses.replace(policy, memory_unit=args.memory_unit)
    return CheckSettings(
        paths=tuple(args.paths),
        output=args.output,
        policy=policy,
        excluded_namespaces=excluded,
        quiet=args.quiet,
    )


def run(
    settings: CheckSettings,
    stdin: BinaryIO | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Check, then write the report to `out`; a progress line goes to `err` when it is a terminal."""
    with progress.Progress(err) as line:
        found = check_paths(settings.paths, settings.policy, settings.excluded_namespaces, stdin, line)
    text = (
        report.render_json(found) if settings.output == "json" else report.render_text(found, settings.quiet)
    )
    (out or sys.stdout).write(text)
    return found.exit_code


def check_paths(
    paths: Sequence[str],
    policy: verdict.Policy,
    excluded_namespaces: frozenset[str] = frozenset(),
    stdin: BinaryIO | None = None,
    line: progress.Progress | None = None,
) -> report.Report:
    """Read and check every path; documents are checked as they are read and then dropped."""
    found = report.Report()
    sources: set[str] = set()  # every file read, also those without a document
    for item in manifests.read_paths(paths, stdin, opened=sources.add):
        if line is not None and found.objects >= PROGRESS_AFTER:
            files = f" in {len(sources):,} files" if len(sources) > 1 else ""
            line.show(f"checking: {found.objects:,} objects{files}")
        if isinstance(item, manifests.ReadError):
            found.errors.append(report.Problem(item.source, item.line, item.problem))
        elif isinstance(item, manifests.Skipped):
            found.skipped.append(report.Problem(item.source, item.line, item.reason))
        else:
            namespace = _text(_metadata(item.obj).get("namespace"))
            if namespace in excluded_namespaces:
                found.skipped.append(
                    report.Problem(item.source, item.line, f"namespace {namespace} is excluded")
                )
                continue
            found.objects += 1
            try:
                result = check_document(item, policy)
            except Exception as err:  # a core bug must not hide the other 9,999 objects' findings
                found.errors.append(
                    report.Problem(item.source, item.line, f"internal error checking this object: {err!r}")
                )
                continue
            if result.has_news():
                found.results.append(result)
    found.files = len(sources)
    return found


def check_document(doc: manifests.Document, policy: verdict.Policy) -> report.ObjectResult:
    """One object's verdict, with each violation placed at the line of its field."""
    decided = verdict.evaluate(doc.obj, policy)
    metadata = _metadata(doc.obj)
    name = _text(metadata.get("name"))
    if not name:
        generate = _text(metadata.get("generateName"))
        name = f"{generate}*" if generate else "(no name)"
    findings = tuple(
        report.Finding(
            line=doc.field_line(v.path),
            path=v.path,
            container=v.container,
            value=v.value,
            problem=v.problem,
            fix=v.fix,
            text=str(v),
        )
        for v in decided.violations
    )
    additions = tuple(
        report.Addition(
            line=doc.field_line(t.path),
            path=t.path,
            node_selector={policy.isolation.label_key: t.isolation} if t.isolation is not None else {},
            scheduler_name=t.scheduler_name,
        )
        for t in decided.templates
        if t.isolation is not None or t.scheduler_name is not None
    )
    # Quota objects name GPU resources without asking for any: only gpushare check reads them.
    warned = (*decided.warnings, *quotas.warnings(doc.obj, policy.names))
    return report.ObjectResult(
        source=doc.source,
        # A JSON List item knows its own line only once its node is composed, i.e. when it has news.
        line=doc.field_line("") if findings or additions or warned else doc.line,
        kind=_text(doc.obj.get("kind")),
        namespace=_text(metadata.get("namespace")),
        name=name,
        origin=doc.origin,
        allowed=decided.allowed,
        message="" if decided.allowed else decided.message(),
        findings=findings,
        warnings=warned,
        additions=additions,
    )


def _metadata(obj: Any) -> dict[str, Any]:
    metadata = obj.get("metadata")
    return metadata if isinstance(metadata, dict) else {}


def _text(value: object) -> str:
    # Escaped as in the core's messages: a lone surrogate ("\ud800" in JSON) cannot be written to a
    # UTF-8 stream, and a control character would reach the terminal.
    return finding.printable(value, _NAME_LIMIT) if isinstance(value, str) else ""
