"""Finding and calling the `coordinator` binary."""

import os
import shutil
import subprocess
from pathlib import Path

from .fit import Fit, load

OUTPUT_LINE = "output directory: "


class CoordinatorError(RuntimeError):
    """The coordinator exited non-zero; the message is what it said on stderr."""

    def __init__(self, command, returncode, stderr):
        self.command = command
        self.returncode = returncode
        self.stderr = stderr
        said = stderr.strip().splitlines()
        super().__init__(said[-1] if said else f"{command[0]} exited with {returncode}")


def coordinator(binary=None):
    """The coordinator binary's path: `binary`, else `$FEDMCMC_COORDINATOR`, else
    `coordinator` on the PATH."""
    for candidate in (binary, os.environ.get("FEDMCMC_COORDINATOR")):
        if candidate:
            if not Path(candidate).is_file():
                raise FileNotFoundError(f"no coordinator binary at {candidate}")
            return str(candidate)
    on_path = shutil.which("coordinator")
    if on_path:
        return on_path
    raise FileNotFoundError(
        "no coordinator binary: build it (`cargo build --release -p fedmcmc-coordinator`) and "
        "pass binary=, set FEDMCMC_COORDINATOR, or put target/release on the PATH"
    )


def flags(options):
    """Keyword arguments as command-line flags: `rows=6000` is `--rows 6000`, `dry_run=True`
    is `--dry-run`; False and None give nothing; a list repeats the flag's values."""
    out = []
    for key, value in options.items():
        if value is None or value is False:
            continue
        flag = "--" + key.replace("_", "-")
        if value is True:
            out.append(flag)
        elif isinstance(value, (list, tuple)):
            out += [flag, *map(str, value)]
        else:
            out += [flag, str(value)]
    return out


def call(args, binary=None, env=None):
    """Runs the coordinator with `args`; its stdout, or CoordinatorError."""
    command = [coordinator(binary), *map(str, args)]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        env=None if env is None else {**os.environ, **env},
    )
    if done.returncode != 0:
        raise CoordinatorError(command, done.returncode, done.stderr)
    return done.stdout


def output_directory(stdout):
    """The directory the job named on its last `output directory:` line."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(OUTPUT_LINE):
            return line[len(OUTPUT_LINE):]
    raise CoordinatorError(["coordinator"], 0, "the coordinator named no output directory")


def simulate(binary=None, **options):
    """`coordinator simulate` with `options` as flags (see `coordinator simulate --help`);
    the `Fit` of its output directory."""
    stdout = call(["simulate", *flags(options)], binary)
    return load(output_directory(stdout), stdout=stdout)


def run(config, binary=None, **options):
    """`coordinator run --config CONFIG` against running parties, `options` as flags (`out`,
    `insecure`, …); the `Fit` of its output directory. With `dry_run=True`, the plan's text."""
    stdout = call(["run", "--config", os.path.abspath(config), *flags(options)], binary)
    if options.get("dry_run"):
        return stdout
    return load(output_directory(stdout), stdout=stdout)
