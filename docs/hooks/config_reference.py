"""MkDocs hook: the config reference page, generated from the Hydra config tree at every build so
that it cannot drift from the configs. Each option's keys are listed with their default, its type
and the comment written beside it in the YAML file."""

from __future__ import annotations

import re
from pathlib import Path

from omegaconf import OmegaConf
from mkdocs.structure.files import File

PAGE = "guide/config-reference.md"
GROUP_ORDER = ["experiment", "algorithm", "privacy", "data", "participation", "runtime", "tracking"]
_KEY = re.compile(r"^(?P<indent>\s*)(?P<key>[A-Za-z_][\w]*):(?P<value>[^#]*?)\s*(?:#\s*(?P<note>.*))?$")


def config_dir(root: Path) -> Path:
    """The config tree of the checkout at ``root`` (inside the package, or at the top level)."""
    for candidate in (root / "fedray" / "conf", root / "conf"):
        if (candidate / "config.yaml").is_file():
            return candidate
    raise FileNotFoundError(f"no config tree (fedray/conf or conf) in {root}")


def _type_name(text: str) -> str:
    if text == "":
        return "mapping"
    try:  # OmegaConf's own YAML rules (4.0e6 is a float there, a string in plain YAML 1.1)
        value = OmegaConf.to_container(OmegaConf.create("v: " + text), resolve=False)["v"]
    except Exception:
        return "str"
    if value is None:
        return "null"
    if isinstance(value, str) and value.startswith("${"):
        return "interpolation"
    return type(value).__name__


def header(path: Path) -> str:
    """The comment block a config file opens with: what the option is for."""
    lines = []
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("# @package"):
            continue
        if not stripped.startswith("#"):
            break
        lines.append(stripped.lstrip("#").strip())
    return " ".join(lines)


def keys(path: Path, prefix: str = "") -> list[tuple[str, str, str, str]]:
    """(dotted key, default, type, note) for every key of a config file, nested keys included;
    Hydra's `defaults` list and `hydra` node are left out (they select, they do not configure).
    The note is the comment beside the key, else the comment lines just above it."""
    rows, stack, above = [], [], []
    skipping = None
    text = path.read_text()
    if "# @package _global_" not in text and prefix:
        stack.append((-1, prefix))
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            above.append(stripped.lstrip("#").strip())
            continue
        match = _KEY.match(line)
        if not match:
            above = []
            continue
        indent = len(match["indent"])
        if skipping is not None and indent > skipping:
            continue
        skipping = None
        key, value, note = match["key"], match["value"].strip(), (match["note"] or "").strip()
        note, above = note or " ".join(above), []
        if indent == 0 and key in ("defaults", "hydra"):
            skipping = indent
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        dotted = ".".join([k for _, k in stack] + [key])
        if value == "":
            stack.append((indent, key))
            if not note:
                continue  # a parent node: its children carry the dotted path
        rows.append((dotted, value if value else "", _type_name(value), note))
    return rows


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render(root: Path) -> str:
    out = [
        "# Config reference",
        "",
        "Generated from the config tree at every docs build. Choose a group's option with",
        "`group=option` (for example `privacy=accountant`); set a key with `group.key=value`. A key",
        "set by an `experiment=` preset overrides the group option's default; the command line",
        "overrides both.",
        "",
        "## Top level (`config.yaml`)",
        "",
        "| key | default | type | what it is |",
        "|---|---|---|---|",
    ]
    out += [f"| `{k}` | `{_cell(v)}` | {t} | {_cell(n)} |" for k, v, t, n in keys(root / "config.yaml")]
    groups = sorted((p for p in root.iterdir() if p.is_dir()), key=lambda p: (
        GROUP_ORDER.index(p.name) if p.name in GROUP_ORDER else len(GROUP_ORDER), p.name))
    for group in groups:
        options = sorted(group.glob("*.yaml"))
        out += ["", f"## `{group.name}`", "",
                "Options: " + ", ".join(f"`{o.stem}`" for o in options) + "."]
        for option in options:
            rows = keys(option, prefix=group.name)
            out += ["", f"### `{group.name}={option.stem}`", ""]
            if header(option):
                out += [header(option), ""]
            if not rows:
                out.append("(no keys of its own: it only selects other groups)")
                continue
            out += ["| key | default | type | what it is |", "|---|---|---|---|"]
            out += [f"| `{k}` | `{_cell(v)}` | {t} | {_cell(n)} |" for k, v, t, n in rows]
    return "\n".join(out) + "\n"


def on_files(files, config):
    root = Path(config["config_file_path"]).parent
    files.append(File.generated(config, PAGE, content=render(config_dir(root))))
    return files
