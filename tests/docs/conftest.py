"""The tally of the docs' shell commands: how many ran for real, how many were only parsed and why."""

from collections import Counter

TESTS = ("test_documented_command_runs", "test_documented_command_parses", "test_readme_runs_in_order")


def pytest_terminal_summary(terminalreporter):
    stats = terminalreporter.stats
    ran, in_order, parsed, other = 0, 0, Counter(), Counter()
    for outcome in ("passed", "failed", "skipped", "deselected"):
        for report in stats.get(outcome, []):
            name = getattr(report, "nodeid", "").split("::")[-1]
            if not name.startswith(TESTS):
                continue
            if getattr(report, "when", "call") != "call" and outcome != "skipped":
                continue
            props = dict(getattr(report, "user_properties", ()))
            if outcome == "passed" and props.get("docs_command") == "ran":
                ran += 1
            elif outcome == "passed" and props.get("docs_command", "").startswith("ran in order: "):
                in_order += int(props["docs_command"].rsplit(" ", 1)[1])
            elif outcome == "passed":
                parsed[props.get("docs_command", "parsed").removeprefix("parsed: ")] += 1
            else:
                kind = (
                    "README in order" if name.startswith(TESTS[2]) else "run" if name.startswith(TESTS[0]) else "parse"
                )
                other[f"{kind} {outcome}"] += 1
    if not (ran or in_order or parsed or other):
        return
    terminalreporter.section("documented shell commands (tests/docs)")
    terminalreporter.line(f"ran for real (exit 0, the files they name written): {ran}")
    if in_order:
        terminalreporter.line(f"ran for real, the README in order in a fresh folder: {in_order}")
    terminalreporter.line(f"only parsed, not run: {sum(parsed.values())}")
    for reason, n in parsed.most_common():
        terminalreporter.line(f"  {n:3d}  {reason}")
    for what, n in sorted(other.items()):
        hint = "  (-k, or -m 'not slow': the slow runs are marked slow)" if what == "run deselected" else ""
        terminalreporter.line(f"{what}: {n}{hint}")
