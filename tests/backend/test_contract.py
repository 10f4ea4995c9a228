"""The written backend contract (ilargi/backend/contract.py) holds for every backend and caller.

* the CPU backend satisfies the Protocol;
* the GPU package defines every required name and its stacked optional kernels (checked by
  parsing its files, so no CuPy is needed);
* the rewriter and metadata reach optional kernels only through ``optional(kernels, "name")``
  with a documented name written in full, and every other kernel they use is a required one.
"""

import ast
from pathlib import Path

import pytest

from ilargi.backend import cpu
from ilargi.backend.contract import OPTIONAL, REQUIRED, Backend, optional

PACKAGE = Path(__file__).resolve().parents[2] / "ilargi"
GPU = PACKAGE / "backend" / "gpu"
CALLERS = sorted((PACKAGE / "rewriter").glob("*.py")) + sorted((PACKAGE / "metadata").glob("*.py"))
STACKED = (
    "fused_lmm",
    "fused_tmm",
    "fused_rowsums",
    "fused_colsums",
    "fused_cross_block",
    "gramvec",
    "check_memory",
)
KERNEL_HOLDERS = ("kernels", "target")  # the names callers give a backend module


def test_cpu_backend_satisfies_the_protocol():
    assert isinstance(cpu, Backend)
    for name in REQUIRED:
        assert hasattr(cpu, name), name
        if name not in ("xp", "name"):
            assert callable(getattr(cpu, name)), name
    assert cpu.name == "cpu"


def test_required_and_optional_are_disjoint_and_documented():
    assert REQUIRED and OPTIONAL
    assert not set(REQUIRED) & set(OPTIONAL)
    for name in (
        "fused_lmm",
        "fused_tmm",
        "fused_rowsums",
        "fused_colsums",
        "fused_cross_block",
        "gramvec",
        "pushed_sums",
        "check_memory",
    ):
        assert name in OPTIONAL


def test_optional_looks_up_documented_names_only():
    assert optional(cpu, "pushed_sums") is cpu.pushed_sums
    assert optional(cpu, "fused_lmm") is None
    with pytest.raises(ValueError, match="not an optional kernel"):
        optional(cpu, "fused_" + "everything")


def _module_names(path):
    """Names bound at the top level of a module: definitions, assignments, imports."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {alias.asname or alias.name.split(".")[0] for alias in node.names}
    return names


def test_gpu_package_defines_every_required_and_stacked_name():
    names = _module_names(GPU / "__init__.py")
    missing = [name for name in REQUIRED + STACKED if name not in names]
    assert not missing, missing


def test_gpu_package_imports_only_names_its_modules_define():
    for path in sorted(GPU.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
                defined = _module_names(GPU / f"{node.module}.py")
                for alias in node.names:
                    assert alias.name in defined, f"{path.name}: {node.module}.{alias.name}"


def test_no_module_imports_a_private_name_of_another():
    for layer in ("backend", "metadata", "rewriter"):
        for path in sorted((PACKAGE / layer).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom):
                    private = [a.name for a in node.names if a.name.startswith("_")]
                    assert not private, f"{path.relative_to(PACKAGE)} imports {private}"


def test_the_gpu_backend_imports_nothing_above_the_backend():
    for path in sorted(GPU.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                absolute = node.module or ""
                # ilargi._config (the settings) is the one layer below the backend
                assert not absolute.startswith("ilargi.") or absolute.startswith(
                    ("ilargi.backend", "ilargi._config")
                )
                # level 2 is ilargi.backend itself (the shared links); above it is the rewriter's
                assert node.level <= 2, f"{path.name} imports from above ilargi.backend"


def _kernel_uses(path):
    """(optional-kernel names, other kernel attributes, string-built lookups) in a caller."""
    optional_names, attributes, dynamic = set(), set(), []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id == "optional":
                name = node.args[1]
                if isinstance(name, ast.Constant) and isinstance(name.value, str):
                    optional_names.add(name.value)
                else:
                    dynamic.append(ast.unparse(node))
            elif node.func.id in ("getattr", "hasattr") and "kernels" in ast.unparse(node.args[0]):
                dynamic.append(ast.unparse(node))
        if isinstance(node, ast.Attribute) and isinstance(node.value, (ast.Name, ast.Attribute)):
            holder = node.value.id if isinstance(node.value, ast.Name) else node.value.attr
            if holder.lstrip("_") in KERNEL_HOLDERS:
                attributes.add(node.attr)
    return optional_names, attributes, dynamic


@pytest.mark.parametrize("path", CALLERS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_callers_use_documented_kernels_only(path):
    optional_names, attributes, dynamic = _kernel_uses(path)
    assert not dynamic, f"kernels looked up by a built name or getattr/hasattr: {dynamic}"
    assert optional_names <= set(OPTIONAL), optional_names - set(OPTIONAL)
    assert attributes <= set(REQUIRED), f"not in the contract: {attributes - set(REQUIRED)}"


def test_the_rules_reach_the_stacked_kernels():
    optional_names = set()
    for path in CALLERS:
        optional_names |= _kernel_uses(path)[0]
    assert set(STACKED) | {"pushed_sums", "NARROW"} <= optional_names
