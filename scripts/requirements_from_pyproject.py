"""Write the files a Hugging Face Space installs from, made from pyproject.toml's dependencies.

A Space does not run `pip install -e .`: it installs `pre-requirements.txt`, then `requirements.txt`, from the
repository's root. Both are made here from `[project].dependencies`, so the dependencies are declared once.

    python scripts/requirements_from_pyproject.py                  # write both files
    python scripts/requirements_from_pyproject.py --check          # exit 1 if they differ from pyproject
    python scripts/requirements_from_pyproject.py --torch-index cu128   # a GPU Space's torch build

torch goes first, alone, in pre-requirements.txt, with the index of the build the Space's hardware needs:
PyPI's Linux wheels of torch are CUDA builds of several GB, so a CPU Space takes PyTorch's CPU index. Only
that one install asks the extra index; the rest comes from PyPI. The index chosen stays in the file, and a
later run (or --check) keeps it unless --torch-index says otherwise.
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"
REQUIREMENTS = ROOT / "requirements.txt"
PRE_REQUIREMENTS = ROOT / "pre-requirements.txt"

TORCH_INDEX_ROOT = "https://download.pytorch.org/whl/"
DEFAULT_TORCH_BUILD = "cpu"
# No extra index: PyPI's own torch wheel, a CUDA build on Linux.
PYPI_BUILD = "pypi"
INDEX_OPTION = "--extra-index-url"

HEADER = "# Made from pyproject.toml by scripts/requirements_from_pyproject.py: edit pyproject.toml, then run it."


@dataclass(frozen=True)
class SpaceRequirements:
    pre_requirements: str
    requirements: str


def torch_index_url(build: str) -> str | None:
    """The index of a torch build: `cpu`, `cuNNN` (PyTorch's indexes), `pypi`, or a full URL."""
    if build == PYPI_BUILD:
        return None
    if build.startswith(("https://", "http://")):
        return build
    if build == "cpu" or (build.startswith("cu") and build[2:].isdigit()):
        return TORCH_INDEX_ROOT + build
    raise ValueError(f"--torch-index takes cpu, cuNNN (e.g. cu128), pypi or a URL, got {build!r}")


def build_in_file(text: str) -> str:
    """The torch build an existing pre-requirements.txt names: its index URL, or `pypi` when it names none."""
    for line in text.splitlines():
        if line.startswith(INDEX_OPTION):
            url = line.removeprefix(INDEX_OPTION).strip()
            return url.removeprefix(TORCH_INDEX_ROOT) if url.startswith(TORCH_INDEX_ROOT) else url
    return PYPI_BUILD


def dependencies(pyproject_text: str) -> list[str]:
    """`[project].dependencies` as pyproject.toml writes them."""
    return list(tomllib.loads(pyproject_text)["project"]["dependencies"])


def render(pyproject_text: str, torch_build: str = DEFAULT_TORCH_BUILD) -> SpaceRequirements:
    requirements = dependencies(pyproject_text)
    torch = [line for line in requirements if Requirement(line).name == "torch"]
    if len(torch) != 1:
        raise ValueError("pyproject.toml must name torch once among its dependencies")
    url = torch_index_url(torch_build)
    pre = [
        HEADER,
        f"# A Space installs this file before requirements.txt: torch alone, its {torch_build} build. A CPU Space",
        "# takes cpu; a GPU Space cuNNN matching its driver, or pypi (--torch-index).",
        *([f"{INDEX_OPTION} {url}"] if url else []),
        torch[0],
    ]
    main = [
        HEADER,
        "# Everything the studio needs, for a Space (which installs pre-requirements.txt first) or any venv.",
        *requirements,
    ]
    return SpaceRequirements("\n".join(pre) + "\n", "\n".join(main) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 if a file differs")
    parser.add_argument(
        "--torch-index",
        default=None,
        help="torch's build: cpu, cuNNN, pypi or an index URL (default: the one pre-requirements.txt names, else cpu)",
    )
    args = parser.parse_args(argv)
    current_pre = PRE_REQUIREMENTS.read_text() if PRE_REQUIREMENTS.exists() else ""
    build = args.torch_index or (build_in_file(current_pre) if current_pre else DEFAULT_TORCH_BUILD)
    try:
        wanted = render(PYPROJECT.read_text(), build)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    files = {PRE_REQUIREMENTS: wanted.pre_requirements, REQUIREMENTS: wanted.requirements}
    stale = [path for path, text in files.items() if not path.exists() or path.read_text() != text]
    if args.check:
        for path in stale:
            print(f"{path.name} differs from pyproject.toml: run python {Path(__file__).relative_to(ROOT)}")
        return 1 if stale else 0
    for path in stale:
        path.write_text(files[path])
        print(f"wrote {path.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
