"""A portable build of llama.cpp for the ``[local]`` extra, and the check that proves it.

llama-cpp-python has no binary wheel: pip compiles llama.cpp, and its default is
``GGML_NATIVE=ON`` (``-march=native``). Such a library only runs on CPUs like the one
that built it: on an Intel VM whose cpuid advertises AMX but whose kernel does not grant
AMX tile state, the first matrix multiply dies with SIGILL (``tilezero``). A wheel built
on one machine and reused on another (pip's wheel cache, a CI cache, a container layer)
has the same trap. So the project builds for a fixed baseline instead:

* x86-64: AVX2 + FMA + F16C + BMI2 (x86-64-v3: every x86-64 CPU since 2013-2015), no
  AVX-512, no AVX-VNNI, no AMX, no runtime dispatch between CPU variants;
* aarch64: the compiler's default (ARMv8-A), which every 64-bit ARM CPU runs;
* elsewhere: ``GGML_NATIVE=OFF``, llama.cpp's generic build.

Every object file also records its compiler switches (``-frecord-gcc-switches``), so the
check can tell a native build from a portable one on *any* machine, even on a CPU where a
native build happens to hold no foreign instruction (an AMD machine without AMX).

This file is also a script, run by ``make install`` before the package is importable::

    python tools/llama_build.py cmake-args   # the CMAKE_ARGS of the portable build
    python tools/llama_build.py check        # exit 1 if the installed library is not portable
    python tools/llama_build.py ensure       # (re)build llama-cpp-python unless it passes the check

It only uses the standard library (and ``objdump`` from binutils, which gcc brings).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import platform
import re
import shlex
import shutil
import struct
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "LLAMA_CPP_VERSION",
    "BuildProblem",
    "check_build",
    "find_library_dir",
    "portable_cmake_args",
    "rebuild_command",
    "recorded_switches",
    "scan_instructions",
]

LLAMA_CPP_VERSION = "0.3.36"
"""The llama-cpp-python release the ``[local]`` extra pins (pyproject and constraints agree)."""

RECORD_SECTION = ".GCC.command.line"
_RECORD_FLAG = "-frecord-gcc-switches"

_X86 = {"x86_64", "amd64", "x64"}
_ARM64 = {"aarch64", "arm64"}

_X86_BASELINE = {
    "GGML_SSE42": "ON",
    "GGML_AVX": "ON",
    "GGML_AVX2": "ON",
    "GGML_FMA": "ON",
    "GGML_F16C": "ON",
    "GGML_BMI2": "ON",
    "GGML_AVX_VNNI": "OFF",
    "GGML_AVX512": "OFF",
    "GGML_AVX512_VBMI": "OFF",
    "GGML_AVX512_VNNI": "OFF",
    "GGML_AVX512_BF16": "OFF",
    "GGML_AMX_TILE": "OFF",
    "GGML_AMX_INT8": "OFF",
    "GGML_AMX_BF16": "OFF",
}

# Compiler switches that tie a build to the CPU that compiled it, or to an extension
# beyond the baseline. Matched against the switches each object file recorded. GCC records
# -march=native expanded (``-march=znver3 -mavx2 ... -mno-amx-tile``), so any CPU name counts;
# the portable build names none.
_FOREIGN_SWITCHES = re.compile(
    r"(?:^|\s)-m(?:arch|cpu|tune)=(?!(?:x86-64(?:-v[23])?|armv8-a|generic)(?:\s|$))\S+"
    r"|(?:^|\s)-mavx512\w*"
    r"|(?:^|\s)-mamx-\w+"
    r"|(?:^|\s)-mavxvnni\w*"
    r"|(?:^|\s)-mavx10\S*"
)

# Instructions outside x86-64-v3, as objdump (AT&T syntax) prints them:
# - any zmm register, or xmm/ymm 16-31 (AVX-512 only);
# - opmask registers and embedded broadcast / masking ({%k1}, {1to8});
# - AMX tile instructions and their configuration;
# - VNNI and BF16 dot products (VEX or EVEX), AVX512-FP16 arithmetic on half vectors.
_FOREIGN_INSTRUCTIONS = re.compile(
    r"%zmm\d+"
    r"|%[xy]mm(?:1[6-9]|2\d|3[01])\b"
    r"|\{%k[0-7]\}|\{1to\d+\}"
    r"|\bk(?:mov|and|andn|or|xor|xnor|not|shiftl|shiftr|test|ortest|add|unpck)[bwdq]\b"
    r"|\b(?:tilezero|tileloadd|tileloaddt1|tilestored|tilerelease|ldtilecfg|sttilecfg)\b"
    r"|\btdp\w+"
    r"|\bvpdp(?:bus|bss|bsu|buu|wss|wsu|wus|wuu)ds?\b"
    r"|\bvdpbf16ps\b|\bvcvtne2?ps2bf16\b"
    r"|\bv(?:add|sub|mul|div|max|min|sqrt|fmadd\d*|fmsub\d*|fnmadd\d*|fnmsub\d*)[sp]h\b"
)


class BuildProblem(RuntimeError):
    """The installed llama.cpp is missing, or not the project's portable build."""


@dataclass
class LibraryReport:
    """What the check found in one shared library."""

    path: Path
    switches: list[str] = field(default_factory=list)
    """Distinct recorded compiler command lines (empty: built without a record)."""
    foreign_switches: list[str] = field(default_factory=list)
    foreign_instructions: int = 0
    examples: list[str] = field(default_factory=list)


def machine() -> str:
    """Return this machine's architecture name, lower-case (``x86_64``, ``aarch64`` ...)."""
    return platform.machine().lower()


def portable_cmake_args(arch: str | None = None, system: str | None = None) -> list[str]:
    """Return the CMake arguments of the portable build for an architecture.

    Args:
        arch: ``platform.machine()`` of the target; default this machine.
        system: ``platform.system()`` of the target; default this machine.

    Returns:
        ``-D`` options for ``CMAKE_ARGS``.
    """
    arch = (arch or machine()).lower()
    system = system or platform.system()
    args = ["-DGGML_NATIVE=OFF", "-DGGML_BACKEND_DL=OFF", "-DGGML_CPU_ALL_VARIANTS=OFF"]
    if arch in _X86:
        args += [f"-D{name}={value}" for name, value in _X86_BASELINE.items()]
    # aarch64 and others: no -march/-mcpu at all, so the compiler's baseline applies.
    if system == "Linux":
        # ELF only: the check reads this section to tell a native build from ours.
        args += [f"-DCMAKE_C_FLAGS={_RECORD_FLAG}", f"-DCMAKE_CXX_FLAGS={_RECORD_FLAG}"]
    return args


def cmake_args_string(arch: str | None = None) -> str:
    """Return :func:`portable_cmake_args` as one ``CMAKE_ARGS`` value.

    ``AMEM_LLAMA_CMAKE_ARGS`` replaces it entirely (for a deliberate local choice, such as
    ``-DGGML_NATIVE=ON`` on a machine that never shares its build; the check then fails).
    """
    override = os.environ.get("AMEM_LLAMA_CMAKE_ARGS")
    if override:
        return override
    return " ".join(portable_cmake_args(arch))


def rebuild_command(python: str | None = None) -> str:
    """Return the one shell command that rebuilds llama.cpp portably in this environment."""
    script = Path(__file__).resolve()
    return f"{shlex.quote(python or sys.executable)} {shlex.quote(str(script))} ensure --force"


def find_library_dir() -> Path:
    """Return the folder of the installed llama.cpp shared libraries, without loading them.

    Raises:
        BuildProblem: llama-cpp-python is not installed, or holds no library.
    """
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        raise BuildProblem("llama-cpp-python is not installed (the [local] extra)")
    package = Path(next(iter(spec.submodule_search_locations)))
    for candidate in (package / "lib", package):
        if any(candidate.glob("*.so*")) or any(candidate.glob("*.dylib")):
            return candidate
    raise BuildProblem(f"no llama.cpp shared library under {package}")


def _libraries(folder: Path) -> list[Path]:
    """List the distinct libraries (wheels hold copies, not symlinks, of versioned names)."""
    found = sorted({p.resolve() for p in folder.iterdir() if p.is_file() and _is_shared_library(p)})
    distinct: dict[str, Path] = {}
    for path in found:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest not in distinct or len(path.name) < len(distinct[digest].name):
            distinct[digest] = path
    return sorted(distinct.values())


def _is_shared_library(path: Path) -> bool:
    name = path.name
    return name.endswith((".so", ".dylib")) or ".so." in name


def recorded_switches(path: Path) -> list[str]:
    """Return the distinct compiler command lines recorded in an ELF file's switch section.

    ``-frecord-gcc-switches`` stores one NUL-terminated command line per object file in
    the ``.GCC.command.line`` section; a build without the flag has no such section.
    """
    data = path.read_bytes()
    section = _elf_section(data, RECORD_SECTION)
    if section is None:
        return []
    lines = [part.decode("utf-8", "replace").strip() for part in section.split(b"\0")]
    return sorted({line for line in lines if line})


def _elf_section(data: bytes, wanted: str) -> bytes | None:
    """Return one section's bytes from an ELF image (None when absent or not ELF)."""
    if len(data) < 64 or data[:4] != b"\x7fELF":
        return None
    is64 = data[4] == 2
    endian = "<" if data[5] == 1 else ">"
    if is64:
        (shoff,) = struct.unpack_from(endian + "Q", data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from(endian + "HHH", data, 0x3A)
    else:
        (shoff,) = struct.unpack_from(endian + "I", data, 0x20)
        shentsize, shnum, shstrndx = struct.unpack_from(endian + "HHH", data, 0x2E)
    if shoff == 0 or shnum == 0 or shstrndx >= shnum:
        return None

    def header(index: int) -> tuple[int, int, int]:
        base = shoff + index * shentsize
        if is64:
            name, _, _, _, offset, size = struct.unpack_from(endian + "IIQQQQ", data, base)
        else:
            name, _, _, _, offset, size = struct.unpack_from(endian + "IIIIII", data, base)
        return name, offset, size

    _, str_offset, str_size = header(shstrndx)
    names = data[str_offset : str_offset + str_size]
    for index in range(shnum):
        name_at, offset, size = header(index)
        end = names.find(b"\0", name_at)
        if names[name_at:end].decode("ascii", "replace") == wanted:
            return data[offset : offset + size]
    return None


def scan_instructions(path: Path, objdump: str | None = None) -> tuple[int, list[str]]:
    """Count instructions outside the x86-64 baseline in a library's code.

    Args:
        path: A shared library.
        objdump: The disassembler; default ``objdump`` on ``PATH``.

    Returns:
        How many instructions are outside the baseline, and up to five of them.

    Raises:
        BuildProblem: objdump is missing or failed.
    """
    tool = objdump or shutil.which("objdump")
    if tool is None:
        raise BuildProblem("objdump is not installed (Debian: apt-get install binutils)")
    result = subprocess.run(
        [tool, "-d", "--no-show-raw-insn", str(path)],
        capture_output=True,
        text=True,
        errors="replace",
        check=False,
    )
    if result.returncode != 0:
        raise BuildProblem(f"objdump failed on {path}: {result.stderr.strip()[:300]}")
    text = result.stdout
    # One pass of the regex over the whole listing (millions of lines); matches are then
    # counted once per instruction line. Code lines look like "  1234:\tvpaddd %ymm1,...".
    lines: dict[int, str] = {}
    for match in _FOREIGN_INSTRUCTIONS.finditer(text):
        start = text.rfind("\n", 0, match.start()) + 1
        if start in lines:
            continue
        end = text.find("\n", match.end())
        line = text[start : end if end >= 0 else len(text)]
        if ":\t" in line:
            lines[start] = " ".join(line.split())
    examples = list(lines.values())[:5]
    return len(lines), examples


def check_build(folder: Path | None = None, *, arch: str | None = None) -> list[LibraryReport]:
    """Check that the installed llama.cpp is the portable build.

    On Linux every library must carry the recorded switches (proof that it was compiled by
    the portable set-up) and none may name ``-march=native`` or an extension beyond the
    baseline; on x86-64 the machine code must also hold no instruction beyond x86-64-v3.

    Args:
        folder: The libraries' folder; default :func:`find_library_dir`.
        arch: The architecture the libraries were built for; default this machine.

    Returns:
        One report per library (all clean).

    Raises:
        BuildProblem: A library is not portable; the message says which and why, and how
            to rebuild.
    """
    folder = folder or find_library_dir()
    arch = (arch or machine()).lower()
    libraries = _libraries(folder)
    if not libraries:
        raise BuildProblem(f"no llama.cpp shared library in {folder}")
    problems: list[str] = []
    reports: list[LibraryReport] = []
    for path in libraries:
        report = LibraryReport(path=path)
        reports.append(report)
        if platform.system() == "Linux":
            report.switches = recorded_switches(path)
            if not report.switches:
                problems.append(
                    f"{path.name}: no record of its compiler switches, so not built by the "
                    "portable set-up (a native or foreign build may crash on another CPU)"
                )
            report.foreign_switches = sorted(
                {m.group(0).strip() for s in report.switches for m in _FOREIGN_SWITCHES.finditer(s)}
            )
            if report.foreign_switches:
                problems.append(f"{path.name}: compiled with {', '.join(report.foreign_switches)}")
        if arch in _X86:
            report.foreign_instructions, report.examples = scan_instructions(path)
            if report.foreign_instructions:
                problems.append(
                    f"{path.name}: {report.foreign_instructions} instructions beyond AVX2 "
                    f"(AVX-512/AMX/VNNI), e.g. {report.examples[0]!r}"
                )
    if problems:
        raise BuildProblem(
            "llama.cpp is not the portable build:\n  - "
            + "\n  - ".join(problems)
            + f"\nRebuild it with: {rebuild_command()}"
        )
    return reports


def _pip_build(force: bool) -> None:
    env = dict(os.environ)
    env["CMAKE_ARGS"] = cmake_args_string()
    env["FORCE_CMAKE"] = "1"
    command = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        # Never a cached or prebuilt wheel: either may come from another CPU or other flags.
        "--no-cache-dir",
        "--no-binary",
        "llama-cpp-python",
        "--no-deps",
        f"llama-cpp-python=={LLAMA_CPP_VERSION}",
    ]
    if force:
        command.insert(4, "--force-reinstall")
    print(f"building llama.cpp (portable: {env['CMAKE_ARGS']}); this takes minutes", flush=True)
    subprocess.run(command, env=env, check=True)


def _installed_version() -> str | None:
    from importlib import metadata  # noqa: PLC0415  (only this command needs it)

    try:
        return metadata.version("llama-cpp-python")
    except metadata.PackageNotFoundError:
        return None


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("cmake-args", help="print the CMAKE_ARGS of the portable build")
    sub.add_parser("check", help="exit 1 unless the installed llama.cpp is portable")
    ensure = sub.add_parser("ensure", help="build llama-cpp-python portably unless it is")
    ensure.add_argument("--force", action="store_true", help="rebuild even if it passes")
    args = parser.parse_args(argv)
    if args.command == "cmake-args":
        print(cmake_args_string())
        return 0
    if args.command == "check":
        try:
            reports = check_build()
        except BuildProblem as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        names = ", ".join(r.path.name for r in reports)
        print(f"llama.cpp is portable ({machine()}): {names}")
        return 0
    if not args.force and _installed_version() == LLAMA_CPP_VERSION:
        try:
            check_build()
        except BuildProblem as exc:
            print(f"rebuilding: {exc}".splitlines()[0], flush=True)
        else:
            return 0
    _pip_build(force=True)
    try:
        check_build()
    except BuildProblem as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
