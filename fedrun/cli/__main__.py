"""``python -m fedrun.cli``: the ``fedrun`` command."""

from fedrun.cli.main import main

main()
