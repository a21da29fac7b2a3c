"""fedrun/cli/compose_checks.py: what a command line names in ``imports``."""

from __future__ import annotations

from fedrun.cli.compose_checks import command_imports


def test_the_modules_a_command_line_names() -> None:
    args = ["--config-dir", "myconf", "algorithm=fedslow", "imports=[mypkg.algo,other]", "resume=x"]
    assert command_imports(args) == ["mypkg.algo", "other"]
    assert command_imports(["+imports=[a]", "++imports=[b]"]) == ["a", "b"]
    assert command_imports(["-m", "imports=[a],[b,c]"]) == ["a", "b", "c"]  # a sweep over it
    assert command_imports(["fl.rounds=3", "tags.imports=x"]) == []
