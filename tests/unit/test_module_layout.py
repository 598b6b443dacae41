"""How trainer/ and chaos/ read: no module runs much past 450 lines unless its docstring says why it is one module,
and the core package names every module it holds."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 460  # lines: about 450, as ruff format writes them
REASON = "Why one module:"


def unexplained(paths: list[Path], limit: int = LIMIT) -> list[str]:
    """The modules longer than ``limit`` lines whose docstring gives no reason (``Why one module: ...``)."""
    out = []
    for p in paths:
        text = p.read_text()
        if text.count("\n") > limit and REASON not in (ast.get_docstring(ast.parse(text)) or ""):
            out.append(f"{p.relative_to(ROOT) if p.is_relative_to(ROOT) else p}: {text.count(chr(10))} lines")
    return out


def test_every_long_module_says_why_it_is_one():
    paths = [
        p for pkg in ("trainer", "chaos") for p in sorted((ROOT / pkg).rglob("*.py")) if "proto" not in p.parts
    ]
    assert not unexplained(paths), "split these by idea, or say why each is one module in its docstring"


def test_a_long_module_without_a_reason_is_named(tmp_path):
    long_body = "x = 1\n" * (LIMIT + 5)
    bare, explained = tmp_path / "bare.py", tmp_path / "explained.py"
    bare.write_text('"""A module."""\n' + long_body)
    explained.write_text(f'"""A module.\n\n{REASON} it is one table.\n"""\n' + long_body)
    assert unexplained([bare, explained]) == [f"{bare}: {LIMIT + 6} lines"]


def test_the_core_package_names_every_module_it_holds():
    """trainer/core/__init__.py is the core's map: a module missing from it is one a reader will not find."""
    import trainer.core

    doc = trainer.core.__doc__ or ""
    modules = [p.stem for p in sorted((ROOT / "trainer" / "core").glob("*.py")) if p.stem != "__init__"]
    assert [m for m in modules if f"trainer.core.{m}`" not in doc] == []
