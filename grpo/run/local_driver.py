"""The process of a local detached driver (`grpo.run.driver.spawn_local`), in a session of its
own: ``python -m grpo.run.local_driver <record> <log> <command ...>`` runs the command in its
process group and records how it ended (`grpo.run.driver.DetachedDriver.run`)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from grpo.run.driver import DetachedDriver


def main(argv: Sequence[str] | None = None) -> int:
    """Run the driver's command (argv: its record, its log, the command); its exit status."""
    record, log, *command = sys.argv[1:] if argv is None else argv
    return DetachedDriver(command, os.getcwd(), log, record, own_group=False).run()


if __name__ == "__main__":
    sys.exit(main())
