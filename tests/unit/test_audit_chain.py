"""The chain's rules without a database: a walk names gaps, breaks and a head gone back; the
CLI says each finding in words."""

from __future__ import annotations

from datetime import UTC, datetime

from gpufleet.cli.audit import findings
from gpufleet.domain import audit_chain
from gpufleet.domain.records import AuditEvent
from gpufleet.server.schemas.admin import AuditVerification

KEY = b"k" * 32


def events(n: int) -> list[AuditEvent]:
    ts = datetime(2026, 1, 1, tzinfo=UTC)
    return [AuditEvent(i, ts, "job.submitted", "key:a", f"j{i}", None, {}) for i in range(1, n)]


def chain(n: int) -> list[tuple[int, str, AuditEvent]]:
    evs = events(n + 1)
    heads = audit_chain.extend(KEY, audit_chain.START, evs)
    return [(h.seq, h.mac, e) for h, e in zip(heads, evs, strict=True)]


def walk(
    entries: list[tuple[int, str, AuditEvent]], recorded: audit_chain.Head | None = None
) -> audit_chain.Verdict:
    w = audit_chain.Walk(KEY, recorded)
    for entry in entries:
        w.feed(*entry)
    return w.verdict(0)


def test_an_intact_chain_up_to_its_recorded_head_is_ok() -> None:
    entries = chain(6)
    verdict = walk(entries, audit_chain.Head(4, entries[3][1]))
    assert verdict.ok and verdict.checked == 6 and verdict.chain_head == 6


def test_missing_runs_are_listed_as_gaps_and_the_first_is_where_it_breaks() -> None:
    entries = chain(10)
    verdict = walk([e for e in entries if e[0] not in (3, 4, 5, 8)])
    assert verdict.gaps == (audit_chain.Gap(3, 5), audit_chain.Gap(8, 8))
    assert verdict.missing == 4 and verdict.checked == 2 and not verdict.ok
    assert verdict.first_broken == audit_chain.Broken(
        3, None, "entries 3 to 5 of the chain are missing"
    )


def test_a_head_recorded_beyond_the_chain_or_with_another_mac_is_behind() -> None:
    entries = chain(6)
    cut = walk(entries[:4], audit_chain.Head(6, entries[5][1]))
    regrown = walk(entries, audit_chain.Head(5, "f" * 64))
    assert cut.head_behind and cut.first_broken is None and not cut.ok
    assert regrown.head_behind and regrown.recorded_head == 5 and not regrown.ok


def test_the_cli_names_every_finding() -> None:
    verdict = audit_chain.Verdict(
        checked=1,
        unsealed=2,
        unsealed_ids=(7, 9),
        gaps=(audit_chain.Gap(2, 3),),
        missing=2,
        first_broken=audit_chain.Broken(2, None, "entries 2 to 3 of the chain are missing"),
        chain_head=5,
        recorded_head=8,
        head_behind=True,
    )
    lines = findings(AuditVerification.of(verdict).model_dump())
    assert lines == [
        "2 entries were written around the server (never sealed): ids 7, 9",
        "2 entries are missing from the chain: at 2-3",
        "the chain first breaks at entry 2: entries 2 to 3 of the chain are missing",
        "the chain ends at entry 5 but this server recorded entry 8: entries were cut from its end",
    ]


def test_a_head_line_cut_short_by_a_crash_is_ignored() -> None:
    head = audit_chain.Head(12, "a" * 64)
    assert audit_chain.parse_head(audit_chain.format_head(head)) == head
    assert audit_chain.parse_head("12 aaaa") is None
