"""The `gpuwaste` command's entry point (the console script, and `python -m gpuwaste`): the
process's allocators are set first, before the command modules import polars
(gpuwaste/process.py), then the command line runs."""

from __future__ import annotations

from gpuwaste.process import configure_process


def main() -> None:
    configure_process()
    from gpuwaste.cli import main as run_command

    run_command()


if __name__ == "__main__":
    main()
