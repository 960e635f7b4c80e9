"""Keeps docs/commands.md true to the tools (test/tools/commands-doc.test).

    python3 commands_doc.py DOC --bin DIR --src DIR [--run-in DIR]

For every tool, from its --help: each flag it lists (csa-compile: the
"csa-compile options"; csa-opt: its --csa-* passes and pipelines) has a row
in the tool's table in DOC, and each row names one of them; a default --help
states ("(default X)", "(alone: X)") is in the row's default column;
csa-opt's rows list exactly the options of their pass. Every --flag the
page names in a tool's section (in prose, code spans, tables and examples)
is a flag of that tool, or of the tool named before it in the same code
span or example line. With --run-in, the lines of the ```sh run blocks run
in order in that (empty) directory with DIR on PATH and $CSA_SRC set; each
must exit 0. Prints one line per tool checked; exits 1 naming every problem.
"""
import argparse
import os
import re
import subprocess
import sys

TOOLS = ["csa-compile", "csa-opt", "csa-run", "csa-score", "csa-checkpoint",
         "csa-reference", "csa-diff", "csa-gpu-check", "csa-op-abi"]
LLVM_TOOLS = {"csa-compile", "csa-opt"}
# Every tool answers these (LLVM's command line also the others).
UNIVERSAL = {"--help", "--version", "-h", "--help-hidden", "--help-list",
             "--help-list-hidden"}
FLAG = re.compile(r"(?<![\w/.=-])(--?[a-z][a-z0-9-]*)")
# A tool's name (also as build/bin/NAME), or a flag.
TOKEN = re.compile(r"(?<![\w.=-])(csa-[a-z-]+)|(?<![\w/.=-])(--?[a-z][a-z0-9-]*)")

problems = []


def problem(message):
    problems.append(message)


def run_help(binary, flag="--help"):
    out = subprocess.run([binary, flag], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    if out.returncode != 0:
        problem(f"{os.path.basename(binary)} {flag} exits {out.returncode}")
    return out.stdout


def abseil_flags(text):
    """{flag: (default or None, implicit value or None)} of a Flags.h --help."""
    flags = {}
    if "\nFlags (" not in text:
        return flags
    for line in text.split("\nFlags (", 1)[1].splitlines()[1:]:
        m = re.match(r"^  (--[a-z0-9-]+)(?: \((default (.*)|alone: (.*)|or alone)\))?$", line)
        if m:
            flags[m.group(1)] = (m.group(3), m.group(4))
    return flags


def llvm_option_names(text):
    """The option names of an LLVM --help listing (not the =value lines)."""
    names = set()
    for line in text.splitlines():
        m = re.match(r"^\s+(--?[a-zA-Z0-9][\w.-]*)", line)
        if m and not line.lstrip().startswith("="):
            names.add(m.group(1))
    return names


def compile_flags(text):
    """csa-compile: the options of its own category."""
    flags = {}
    section = text.split("csa-compile options:", 1)[1]
    for line in section.splitlines():
        m = re.match(r"^  (--?[a-z][a-z0-9-]*)", line)
        if m:
            flags[m.group(1)] = (None, None)
    return flags


def opt_passes(text):
    """csa-opt: {--csa-pass: set of its option names}."""
    passes, current = {}, None
    for line in text.splitlines():
        m = re.match(r"^      (--[a-z][\w-]*)\s", line)
        if m:
            current = m.group(1) if m.group(1).startswith("--csa-") else None
            if current:
                passes[current] = set()
            continue
        m = re.match(r"^        --([a-z][\w-]*)", line)
        if m and current:
            passes[current].add(m.group(1))
        elif not line.startswith("        "):
            current = None if not line.startswith("      ") else current
    return passes


def sections(doc):
    """{tool: text of its '## tool' section}."""
    parts = re.split(r"^## (\S+)\s*$", doc, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts), 2)}


def table_rows(text):
    """[(first-cell flag, cells)] of the section's table."""
    rows = []
    for line in text.splitlines():
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        m = re.match(r"`(--?[a-z][a-z0-9-]*)", cells[0])
        if m:
            rows.append((m.group(1), cells))
        else:
            problem(f"a table row names no flag: {line}")
    return rows


def fences(text):
    """[(info string, lines)] of the fenced blocks, and the text without them."""
    blocks, rest, current, info = [], [], None, ""
    for line in text.splitlines():
        if line.startswith("```"):
            if current is None:
                current, info = [], line[3:].strip()
            else:
                blocks.append((info, current))
                current = None
            continue
        (rest if current is None else current).append(line)
    return blocks, "\n".join(rest)


def check_mentions(tool, text, valid):
    """Every --flag in `text` is a flag of its tool."""
    def check(flag, owner, where):
        if flag not in valid[owner]:
            problem(f"{tool} section: {where} names {flag}, which {owner} does not have")

    def walk(snippet, where):
        owner = tool  # until another tool is named
        for m in TOKEN.finditer(snippet):
            if m.group(1):
                owner = m.group(1) if m.group(1) in valid else owner
            else:
                check(m.group(2), owner, where)

    blocks, prose = fences(text)
    for _, lines in blocks:
        for line in lines:
            walk(line.split(" #")[0], f"example '{line.strip()}'")
    for span in re.findall(r"`([^`\n]+)`", prose):
        walk(span, f"`{span}`")
    for flag in FLAG.findall(re.sub(r"`[^`\n]+`", " ", prose)):
        check(flag, tool, "the prose")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("doc")
    parser.add_argument("--bin", required=True)
    parser.add_argument("--src", required=True)
    parser.add_argument("--run-in")
    args = parser.parse_args()
    doc = open(args.doc, encoding="utf-8").read()
    found = sections(doc)
    for name in found:
        if name not in TOOLS:
            problem(f"section '## {name}' is no tool")

    helps, valid, documented = {}, {}, {}
    for tool in TOOLS:
        binary = os.path.join(args.bin, tool)
        helps[tool] = run_help(binary)
        if tool in LLVM_TOOLS:
            valid[tool] = llvm_option_names(run_help(binary, "--help-hidden")) | UNIVERSAL
        else:
            documented[tool] = abseil_flags(helps[tool])
            valid[tool] = set(documented[tool]) | UNIVERSAL
    documented["csa-compile"] = compile_flags(helps["csa-compile"])
    passes = opt_passes(helps["csa-opt"])

    for tool in TOOLS:
        if tool not in found:
            problem(f"docs/commands.md has no section '## {tool}'")
            continue
        text = found[tool]
        rows = table_rows(text)
        named = [flag for flag, _ in rows]
        wanted = passes if tool == "csa-opt" else documented[tool]
        for flag in sorted(set(wanted) - set(named)):
            problem(f"{tool}: {flag} (in its --help) has no row in docs/commands.md")
        for flag in sorted(set(named) - set(wanted)):
            problem(f"{tool}: the row of {flag} names no flag of its --help")
        for flag in sorted({f for f in named if named.count(f) > 1}):
            problem(f"{tool}: {flag} has more than one row")
        for flag, cells in rows:
            if tool == "csa-opt":
                given = set(re.findall(r"`([a-z][\w-]*)(?:=|`)", cells[-1]))
                for option in sorted(passes.get(flag, set()) - given):
                    problem(f"csa-opt: {flag}'s option {option} is not in its row")
                for option in sorted(given - passes.get(flag, set())):
                    problem(f"csa-opt: {flag} has no option {option}")
                continue
            default, alone = documented[tool].get(flag, (None, None))
            if len(cells) < 3:
                problem(f"{tool}: the row of {flag} has no default column")
                continue
            for value, what in [(default, "default"), (alone, "value alone")]:
                if value is not None and not re.search(
                        r"(?<![\w.])" + re.escape(value) + r"(?![\w.])", cells[2]):
                    problem(f"{tool}: {flag}'s {what} is {value} (--help), "
                            f"the page says '{cells[2]}'")
            if alone is not None and "alone" not in cells[2]:
                problem(f"{tool}: {flag} takes a value alone ({alone}); its row does not say so")
        check_mentions(tool, text, valid)
        blocks, _ = fences(text)
        if not any(info.startswith("sh") for info, _ in blocks):
            problem(f"{tool}: no example")
        print(f"{tool}: {len(rows)} {'passes' if tool == 'csa-opt' else 'flags'}, "
              f"{sum(1 for info, _ in blocks if info == 'sh run')} runnable blocks")

    if args.run_in and not problems:
        env = dict(os.environ, PATH=args.bin + os.pathsep + os.environ.get("PATH", ""),
                   CSA_SRC=args.src)
        commands = 0
        for tool in TOOLS:
            for info, lines in fences(found.get(tool, ""))[0]:
                if info != "sh run":
                    continue
                for line in lines:
                    if not line.strip() or line.lstrip().startswith("#"):
                        continue
                    out = subprocess.run(["bash", "-o", "pipefail", "-c", line],
                                         cwd=args.run_in, env=env, stdout=subprocess.PIPE,
                                         stderr=subprocess.STDOUT, text=True)
                    commands += 1
                    if out.returncode != 0:
                        problem(f"{tool} example exits {out.returncode}: {line}\n{out.stdout}")
        print(f"ran {commands} example commands")

    if problems:
        for p in problems:
            print(f"commands_doc: {p}", file=sys.stderr)
        sys.exit(1)
    print("docs/commands.md agrees with the tools")


if __name__ == "__main__":
    main()
