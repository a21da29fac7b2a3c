"""What the Makefile's recipes tell a newcomer (``make help`` itself: tests/cli/test_make_help.py)."""

from tests.conftest import REPO


def _recipe(target: str) -> str:
    return (REPO / "Makefile").read_text().split(f"\n{target}:", 1)[1].split("\n\n", 1)[0]


def test_make_run_ends_saying_how_to_call_fedrun():
    recipe = _recipe("run")
    assert "activate" in recipe.splitlines()[-1] and "$(BIN)/fedrun" in recipe.splitlines()[-1]


def test_the_readme_says_how_to_call_fedrun_before_its_first_command():
    first_run = (REPO / "README.md").read_text().split("## A first run", 1)[1]
    assert first_run.index("source .venv/bin/activate") < first_run.index("fedrun experiment=smoke")
