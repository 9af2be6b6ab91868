#!/usr/bin/env python3
"""Size ratchet: no product file over its line limit, no product function over its limit.

    python3 tests/style/check_sizes.py REPO [--report]

The limits are in tests/style/size_limits.txt. While the largest file or function is above the
goal (600 and 80 lines), its limit is exactly the largest one's size: growing it fails, and so
does shrinking it without lowering the limit (the message says to), so the limit only goes down
until it reaches the goal, as tigerbeetle's tidy check does. Product code: every tracked C, C++,
CUDA and Python source outside tests/ and python/tests/.

Functions are measured from the line that opens their body to the line that closes it. C++ is
read as clang-format leaves it (tests/style/check_format.sh): a body opens with a `{` ending a
line whose statement is a signature; a lambda counts towards the function it is in. Python
functions are measured by the ast module, each method, nested function and class on its own.
"""
import ast
import pathlib
import re
import subprocess
import sys

GOALS = {"file": 600, "function": 80}
CPP = (".c", ".cc", ".cpp", ".h", ".hpp", ".cu", ".cuh")
CONTROL = re.compile(r"^\s*(?:\}\s*)?(?:if|for|while|switch|else|do|try|catch)\b|^\s*\}?\s*else\b")
CONTAINER = re.compile(r"^\s*(?:template\s*<.*>\s*)?(?:namespace|class|struct|union|enum|extern)\b")


def product_files(repo: pathlib.Path) -> list:
    listed = subprocess.run(["git", "ls-files"], cwd=repo, capture_output=True, text=True, check=True).stdout
    return [f for f in listed.split() if f.endswith(CPP + (".py",)) and not f.startswith(("tests/", "python/tests/"))]


def code_only(line: str, state: dict) -> str:
    """The line without comments and string or character literals (raw strings may span lines)."""
    out, i = [], 0
    while i < len(line):
        if state.get("raw"):
            end = line.find(state["raw"], i)
            if end < 0:
                return "".join(out)
            i, state["raw"] = end + len(state["raw"]), None
            continue
        if state.get("block"):
            end = line.find("*/", i)
            if end < 0:
                return "".join(out)
            i, state["block"] = end + 2, False
            continue
        if line.startswith("//", i):
            break
        if line.startswith("/*", i):
            state["block"] = True
            i += 2
            continue
        raw = re.match(r'R"([^()\s]{0,16})\(', line[i:])
        if raw and (i == 0 or not (line[i - 1].isalnum() or line[i - 1] == "_")):
            state["raw"] = ")" + raw.group(1) + '"'
            i += raw.end()
            continue
        if line[i] == "'" and re.search(r"(?<![\w.])\.?\d[\w.']*$", line[:i]):
            out.append(line[i])  # a digit separator (1'000'000), not a character literal
            i += 1
            continue
        if line[i] in "\"'":
            quote, j = line[i], i + 1
            while j < len(line) and line[j] != quote:
                j += 2 if line[j] == "\\" else 1
            out.append(quote + quote)
            i = j + 1
            continue
        out.append(line[i])
        i += 1
    return "".join(out)


def brace_kind(head: str, rest: str, in_function: bool) -> str:
    """What a `{` opens, from the statement before it and the rest of its line."""
    if in_function:
        return "block"
    if CONTAINER.search(head):
        return "container"
    if rest.strip() or CONTROL.search(head) or "(" not in head or re.search(r"=\s*$", head):
        return "block"  # an initializer or a one-line body; a brace-initialized member's `= {`
    return "function"


def cpp_functions(text: str) -> list:
    """(line, lines) of each outermost function body: lambdas count towards their function."""
    found, stack, statement, state, macro = [], [], "", {}, False
    for number, raw_line in enumerate(text.splitlines(), 1):
        if macro or raw_line.lstrip().startswith("#"):  # preprocessor lines, continued or not
            macro = raw_line.rstrip().endswith("\\")
            continue
        line = code_only(raw_line, state)
        for k, c in enumerate(line):
            if c == "{":
                in_function = any(kind == "function" for kind, _ in stack)
                stack.append((brace_kind(statement, line[k + 1:], in_function), number))
                statement = ""
            elif c == "}":
                if stack:
                    kind, start = stack.pop()
                    if kind == "function":
                        found.append((start, number - start + 1))
                statement = ""
            elif c == ";":
                statement = ""
            else:
                statement += c
        statement += " "
    return found


DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def own_lines(node) -> int:
    """A Python function's lines less those of the functions and classes defined in it, which are
    measured on their own (a factory returning a class is as long as its own statements)."""
    nested, stack = 0, list(ast.iter_child_nodes(node))
    while stack:
        child = stack.pop()
        if isinstance(child, DEFS):
            nested += child.end_lineno - child.lineno + 1
        else:
            stack.extend(ast.iter_child_nodes(child))
    return node.end_lineno - node.lineno + 1 - nested


def python_functions(text: str) -> list:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    return [(n.lineno, own_lines(n)) for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def measure(repo: pathlib.Path) -> tuple:
    files, functions = [], []
    for name in product_files(repo):
        text = (repo / name).read_text(errors="replace")
        files.append((text.count("\n") + (0 if text.endswith("\n") or not text else 1), name))
        body = python_functions(text) if name.endswith(".py") else cpp_functions(text)
        functions += [(lines, f"{name}:{start}") for start, lines in body]
    return sorted(files, reverse=True), sorted(functions, reverse=True)


def read_limits(path: pathlib.Path) -> dict:
    limits = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, value = line.split()
            limits[key] = int(value)
    return limits


def main() -> int:
    repo = pathlib.Path(sys.argv[1])
    limits_file = repo / "tests/style/size_limits.txt"
    limits = read_limits(limits_file)
    files, functions = measure(repo)
    if "--report" in sys.argv:
        for lines, where in functions[:20]:
            print(f"function {lines:5d} {where}")
        for lines, where in files[:10]:
            print(f"file     {lines:5d} {where}")
    failed = False
    for kind, measured in (("file", files), ("function", functions)):
        limit, goal = limits[f"max_{kind}_lines"], GOALS[kind]
        over = [(n, where) for n, where in measured if n > limit]
        for n, where in over:
            print(f"{where}: {kind} of {n} lines, over the limit of {limit} (tests/style/size_limits.txt): split it")
        failed |= bool(over)
        largest = measured[0][0] if measured else 0
        if not over and limit > max(largest, goal):
            print(f"the largest {kind} is now {largest} lines: lower max_{kind}_lines in {limits_file} from {limit} "
                  f"to {max(largest, goal)} (the limit only goes down)")
            failed = True
        if limit < goal:
            print(f"max_{kind}_lines {limit} is below the goal of {goal}: the goal is the floor")
            failed = True
    if not failed:
        print(f"sizes ok: files <= {limits['max_file_lines']} lines, functions <= {limits['max_function_lines']}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
