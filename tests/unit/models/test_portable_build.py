"""The llama.cpp build is portable, and the check that says so catches the builds that are not.

The installed library is checked on every machine: a native build fails here even on a CPU
without AMX (no switch record, or ``-march=native`` in it), and a foreign build fails on its
instructions. The checker itself is tested on small libraries compiled by the test.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from agentic_memory.models import llama_build
from agentic_memory.models.llama_build import (
    LLAMA_CPP_VERSION,
    BuildProblem,
    check_build,
    portable_cmake_args,
    recorded_switches,
    scan_instructions,
)

ROOT = Path(__file__).resolve().parents[3]
X86 = platform.machine().lower() in ("x86_64", "amd64")
LINUX = platform.system() == "Linux"
needs_gcc = pytest.mark.skipif(
    not (shutil.which("gcc") and shutil.which("objdump")), reason="needs gcc and objdump"
)
needs_x86_linux = pytest.mark.skipif(not (X86 and LINUX), reason="x86-64 Linux only")


def test_the_pins_agree_with_the_build_script() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    local = project["project"]["optional-dependencies"]["local"]
    assert f"llama-cpp-python[server]=={LLAMA_CPP_VERSION}" in local
    assert f"llama_cpp_python=={LLAMA_CPP_VERSION}" in (ROOT / "constraints.txt").read_text()


def test_the_portable_flags() -> None:
    x86 = portable_cmake_args("x86_64", "Linux")
    assert "-DGGML_NATIVE=OFF" in x86
    for on in ("AVX", "AVX2", "FMA", "F16C", "BMI2"):
        assert f"-DGGML_{on}=ON" in x86
    for off in ("AVX512", "AVX512_VNNI", "AVX_VNNI", "AMX_TILE", "AMX_INT8", "BACKEND_DL"):
        assert f"-DGGML_{off}=OFF" in x86
    assert "-DCMAKE_C_FLAGS=-frecord-gcc-switches" in x86
    arm = portable_cmake_args("aarch64", "Linux")
    assert "-DGGML_NATIVE=OFF" in arm
    assert not any("GGML_CPU_ARM_ARCH" in a or "AVX" in a for a in arm)
    assert not any("record" in a for a in portable_cmake_args("arm64", "Darwin"))
    assert all("native" not in a.lower() or a == "-DGGML_NATIVE=OFF" for a in x86 + arm)


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make (the README's set-up)")
def test_every_set_up_step_gets_the_portable_flags(tmp_path: Path) -> None:
    """``make install``'s pip steps see CMAKE_ARGS with GGML_NATIVE=OFF: none builds natively."""
    probe = tmp_path / "probe.mk"
    probe.write_text(f'include {ROOT / "Makefile"}\nprobe:\n\t@echo "$$CMAKE_ARGS"\n')
    env = {k: v for k, v in os.environ.items() if k not in ("AMEM_LLAMA_CMAKE_ARGS", "CMAKE_ARGS")}
    out = subprocess.run(
        ["make", "-s", "-C", str(ROOT), "-f", str(probe), "probe"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out == portable_cmake_args()
    assert "-DGGML_NATIVE=OFF" in out


def test_an_explicit_override_replaces_the_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMEM_LLAMA_CMAKE_ARGS", "-DGGML_NATIVE=ON")
    assert llama_build.cmake_args_string() == "-DGGML_NATIVE=ON"


def _library(tmp_path: Path, name: str, source: str, *flags: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    c_file = folder / "kernel.c"
    c_file.write_text(source)
    out = folder / "libggml-cpu.so"
    subprocess.run(
        ["gcc", "-O2", "-shared", "-fPIC", *flags, "-o", str(out), str(c_file)],
        check=True,
        capture_output=True,
    )
    return folder


AVX2_KERNEL = """
#include <immintrin.h>
__m256 add8(__m256 a, __m256 b, __m256 c) { return _mm256_fmadd_ps(a, b, c); }
"""
AVX512_KERNEL = """
#include <immintrin.h>
__m512 add16(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }
"""
AMX_KERNEL = """
#include <immintrin.h>
void zero(void) { _tile_zero(0); }
"""


@needs_gcc
@needs_x86_linux
def test_a_portable_library_passes(tmp_path: Path) -> None:
    folder = _library(
        tmp_path, "ok", AVX2_KERNEL, "-mavx2", "-mfma", "-mf16c", "-frecord-gcc-switches"
    )
    [report] = check_build(folder, arch="x86_64")
    assert report.foreign_instructions == 0
    assert any("-mavx2" in s for s in report.switches)


@needs_gcc
@needs_x86_linux
@pytest.mark.parametrize(
    ("source", "flags", "found"),
    [
        (AVX512_KERNEL, ("-mavx512f",), r"zmm"),
        (AMX_KERNEL, ("-mamx-tile",), r"tilezero"),
    ],
    ids=["avx512", "amx"],
)
def test_instructions_beyond_avx2_are_found(
    tmp_path: Path, source: str, flags: tuple[str, ...], found: str
) -> None:
    # Compiled with a switch record that looks harmless, so only the machine code tells.
    folder = _library(tmp_path, "bad", source, *flags, "-frecord-gcc-switches")
    count, examples = scan_instructions(folder / "libggml-cpu.so")
    assert count >= 1 and re.search(found, examples[0])
    with pytest.raises(
        BuildProblem, match=r"instructions beyond AVX2.*\n.*Rebuild it with: .*ensure --force"
    ):
        check_build(folder, arch="x86_64")


@needs_gcc
@needs_x86_linux
def test_a_native_build_fails_even_without_foreign_instructions(tmp_path: Path) -> None:
    # What a native build on an AMD machine without AMX looks like: its code holds no
    # AVX-512 or AMX, yet it was made for this CPU alone.
    folder = _library(tmp_path, "native", AVX2_KERNEL, "-march=native", "-frecord-gcc-switches")
    # GCC records -march=native expanded to this CPU's name (-march=znver3, ...).
    assert any("-march=" in s for s in recorded_switches(folder / "libggml-cpu.so"))
    with pytest.raises(BuildProblem, match=r"compiled with (\S+, )*-march="):
        check_build(folder, arch="x86_64")


@needs_gcc
@pytest.mark.skipif(not LINUX, reason="the switch record is an ELF section")
def test_a_build_without_a_switch_record_fails(tmp_path: Path) -> None:
    # pip's default build of llama-cpp-python (no CMAKE_ARGS): nothing says how it was made.
    folder = _library(tmp_path, "unknown", "int f(int x) { return x + 1; }\n")
    assert recorded_switches(folder / "libggml-cpu.so") == []
    with pytest.raises(BuildProblem, match="no record of its compiler switches"):
        check_build(folder)


def test_the_section_reader_ignores_files_that_are_not_elf(tmp_path: Path) -> None:
    junk = tmp_path / "lib.so"
    junk.write_bytes(b"\x7fELF" + b"\x00" * 10)
    assert recorded_switches(junk) == []
    junk.write_bytes(b"not a library")
    assert recorded_switches(junk) == []


def test_an_empty_library_folder_fails(tmp_path: Path) -> None:
    with pytest.raises(BuildProblem, match="no llama.cpp shared library"):
        check_build(tmp_path)


@pytest.mark.skipif(shutil.which("objdump") is None or not LINUX, reason="needs objdump on Linux")
def test_the_installed_llama_cpp_is_the_portable_build() -> None:
    try:
        folder = llama_build.find_library_dir()
    except BuildProblem as exc:
        pytest.skip(f"the [local] extra is not installed: {exc}")
    reports = check_build(folder)
    names = [r.path.name for r in reports]
    assert any(n.startswith("libggml-cpu") for n in names), names
    cpu = next(r for r in reports if r.path.name.startswith("libggml-cpu"))
    if X86:
        assert any("-mavx2" in s for s in cpu.switches)
    # GCC records its defaults (-march=x86-64 -mtune=generic): no CPU of its own is named.
    named = {m for r in reports for s in r.switches for m in re.findall(r"-march=\S+", s)}
    assert named <= {"-march=x86-64"}, named
    assert all(not r.foreign_switches and not r.foreign_instructions for r in reports)
