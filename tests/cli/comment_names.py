#!/usr/bin/env python3
# comment_names.py ROOT: the comments of ROOT/src (.c, .h, .cu, .cuh) name only what exists. A name a
# comment writes like a call, name(), and a bare snake_case name that starts like one of the tree's
# API functions (its first word, e.g. target_ or ops_, the first word of three or more functions
# declared in src/ headers), must be an identifier of the tree's code (C and CUDA sources without
# their comments, their strings included: a key or attribute name the code writes, under src, tools,
# tests and bench; the Python, shell and CMake files there) or a file's name without its extension
# (a module: gpu_info for gpu_info.c). So a library function the code calls (free(), exp()) is known; a name the code no longer
# has (a function renamed or removed) is not. Not checked: names after '.', '->', '::', '/', '#',
# '*' or '-' (members, paths, options), file names (name.c, name.h, ...), names beginning or ending
# with '_' (shorthands like drafter_config_parse / _load, wildcards like backend_*).
# Prints one line "file:line: name" per name it does not know and exits 1; prints "ok" otherwise.
import collections
import os
import re
import sys

# Names of code outside the tree that comments may write though no code here uses them (a library's
# or a reference implementation's function). Only genuinely external names belong here.
EXTERNAL = set()

KEYWORDS = {"return", "else", "case", "goto", "do", "sizeof", "if", "while", "for", "switch", "typedef"}
# this check and its test, which name the made-up stale names
SELF = ("tests/cli/comment_names.py", "tests/cli/test_comment_names.sh")
C_EXT = (".c", ".h", ".cu", ".cuh")
OTHER_EXT = (".py", ".sh", ".cmake", ".txt")
TOKEN = re.compile(r"[A-Za-z_]\w*")
# a definition or declaration: type words, then the name and '(' (one line)
DECL = re.compile(r"^[ \t]*(?:[A-Za-z_]\w*[ \t\*]+)+?\**(\w+)\s*\(", re.M)
PIECES = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])\'', re.S)
NAME = re.compile(r"(?<![\w.>:/#*-])([A-Za-z]\w*[A-Za-z0-9])(\(\))?(?![\w*]|\.(?:c|h|cu|cuh|py|sh|md|json)\b)")


def split(text):
    """(code without comments, the same without strings, [(first line, comment text)])"""
    comments = []

    def cut(m):
        piece = m.group(0)
        if piece[0] != "/":
            return piece
        comments.append((text.count("\n", 0, m.start()) + 1, piece))
        return "\n" * piece.count("\n")

    code = PIECES.sub(cut, text)
    return code, PIECES.sub(lambda m: '""' if m.group(0)[0] in "\"'" else m.group(0), code), comments


def files_under(root, top):
    for d, subdirs, names in os.walk(os.path.join(root, top)):
        subdirs[:] = sorted(s for s in subdirs if not s.startswith(("build", ".", "__pycache__")))
        for n in sorted(names):
            yield os.path.relpath(os.path.join(d, n), root)


def main(root):
    tokens, stems, public, comments = set(), set(), set(), {}
    for top in ("src", "tools", "tests", "bench"):
        for f in files_under(root, top):
            if f in SELF:
                continue
            stems.add(os.path.basename(f).split(".")[0])
            text = open(os.path.join(root, f), errors="replace").read()
            if f.endswith(C_EXT):
                code, bare, com = split(text)
                if f.startswith("src/"):
                    comments[f] = com
                tokens.update(TOKEN.findall(code))
                if f.startswith("src/") and f.endswith(".h"):
                    for m in DECL.finditer(bare):
                        words = TOKEN.findall(m.group(0))
                        if not set(words[:-1]) & KEYWORDS and "static" not in words:
                            public.add(m.group(1))
            elif f.endswith(OTHER_EXT):
                tokens.update(TOKEN.findall(text))
    firsts = collections.Counter(n.split("_")[0] for n in public if "_" in n)
    prefixes = {p for p, count in firsts.items() if count >= 3}
    hits = []
    for f in sorted(comments):
        for line, c in comments[f]:
            for m in NAME.finditer(c):
                name, call = m.group(1), m.group(2)
                if name in tokens or name in stems or name in EXTERNAL:
                    continue
                if not call and not ("_" in name and name == name.lower() and name.split("_")[0] in prefixes):
                    continue
                hits.append(f"{f}:{line + c.count(chr(10), 0, m.start())}: {name}{call or ''}")
    for h in hits:
        print(h)
    if not hits:
        print("ok")
    return 1 if hits else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
