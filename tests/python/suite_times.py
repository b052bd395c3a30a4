"""Where the suite's time goes: each test module's time (its tests' setup, call and teardown added
up, so a module- or session-scoped fixture counts in the module whose test started it) and the
slowest tests.

pytest prints the slowest modules at the end of its report; with TRAINER_TEST_TIMES=FILE it also
writes every module's time, the slowest 15 modules and the slowest 15 tests to FILE (tools/test
prints that file after its summary). Under pytest-xdist only the controller reports, from the
reports its workers sent.
"""
from __future__ import annotations

import collections
import os
import pathlib

import pytest

SLOWEST = 15


class SuiteTimes:
    def __init__(self) -> None:
        self.modules: dict[str, float] = collections.defaultdict(float)
        self.counts: dict[str, int] = collections.Counter()
        self.tests: dict[str, float] = collections.defaultdict(float)

    def pytest_runtest_logreport(self, report) -> None:
        module = report.nodeid.split("::", 1)[0]
        self.modules[module] += report.duration
        self.tests[report.nodeid] += report.duration
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            self.counts[module] += 1

    def _module_line(self, module: str) -> str:
        return f"{self.modules[module]:8.1f} s {self.counts[module]:4d} tests  {module}"

    def slowest_modules(self) -> list[str]:
        ranked = sorted(self.modules, key=self.modules.get, reverse=True)[:SLOWEST]
        return [self._module_line(m) for m in ranked]

    def report(self) -> str:
        total = sum(self.modules.values())
        out = [f"== pytest time per module ({len(self.modules)} modules, {total:.0f} s of test time in all) =="]
        out += [self._module_line(m) for m in sorted(self.modules)]
        out.append(f"== the slowest {SLOWEST} modules ==")
        out += self.slowest_modules()
        out.append(f"== the slowest {SLOWEST} tests (setup + call + teardown) ==")
        ranked = sorted(self.tests, key=self.tests.get, reverse=True)[:SLOWEST]
        out += [f"{self.tests[t]:8.1f} s  {t}" for t in ranked]
        return "\n".join(out) + "\n"

    def pytest_terminal_summary(self, terminalreporter, config) -> None:
        if not self.modules:
            return
        terminalreporter.write_sep("=", f"the slowest {SLOWEST} modules (setup + call + teardown)")
        for line in self.slowest_modules():
            terminalreporter.write_line(line)
        path = os.environ.get("TRAINER_TEST_TIMES")
        if path:
            pathlib.Path(path).write_text(self.report())


def register(config: pytest.Config) -> None:
    """Registers the plugin on the controller (or a plain run), never in an xdist worker."""
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(SuiteTimes(), "trainer-suite-times")
